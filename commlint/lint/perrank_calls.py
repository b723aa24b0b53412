"""Calls of the per-rank interpreter (`perrank.Rank`): what a call expression calls, opaque
calls, and interpreting the program's own functions and classes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from commlint.lint import perrank_layers as layers
from commlint.lint import perrank_values as values
from commlint.lint.perrank_builtins import _tensor_method
from commlint.lint.perrank_mesh import MeshMethod
from commlint.lint.perrank_model import (
    MAX_DEPTH,
    MAX_STEPS,
    TORCH_MODULE,
    TRACE_OPS,
    UNK,
    Abort,
    Builtin,
    Cls,
    EnvMethod,
    ExitStackMethod,
    Fn,
    Group,
    GroupMethod,
    Mod,
    Obj,
    Property,
    RankFlag,
    Stop,
    Tensor,
    TensorMethod,
    WorkMethod,
    _bind,
    _Break,
    _class_attr,
    _Continue,
    _is_known,
    _Return,
)
from commlint.lint.perrank_modules import ShardMethod, Wrapped
from commlint.lint.perrank_pipelining import ScheduleMethod

TORCH_MODULES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList"})


@dataclass
class Sequential:
    """`torch.nn.Sequential` holding modules of the project: calling it runs them in order."""

    modules: list
    shard: object = None  # `perrank_modules.Shard` once wrapped (`fully_shard(model)`)


class Calls:
    """`Rank`'s calls of the program's functions, classes and builtins."""

    # ------------------------------------------------------------------ calls
    def call_expr(self, e: ast.Call, env: dict) -> object:
        func = self.expr(e.func, env)
        args: list = []
        for a in e.args:
            if isinstance(a, ast.Starred):
                v = self.expr(a.value, env)
                if not isinstance(v, list | tuple | range):
                    return self.opaque(e)
                args.extend(v)
            else:
                args.append(self.expr(a, env))
        kwargs: dict = {}
        for kw in e.keywords:
            if kw.arg is None:
                v = self.expr(kw.value, env)
                if not isinstance(v, dict):
                    return self.opaque(e)
                kwargs.update(v)
            else:
                kwargs[kw.arg] = self.expr(kw.value, env)
        outer, self.env = self.env, env
        if self.cur is self.ev:
            self.ev.recorded_lines.add(e.lineno)
        backward = isinstance(e.func, ast.Attribute) and e.func.attr == "backward"
        if backward and not args and self.sharded_backward(e):
            self.env = outer
            return None
        try:
            return values.call_origin(self, self.call(func, args, kwargs, e), func, args, kwargs, e)
        finally:
            self.env = outer

    def opaque(self, e: ast.Call) -> object:
        site = (e.lineno, e.col_offset + 1)
        if site not in self.cur.comm_sites:
            return UNK
        ends = self.cur.comm_ends.get(site)
        if ends and (e.end_lineno, (e.end_col_offset or 0) + 1) not in ends:
            return UNK  # `model(x).pow(2)`: a call on the result of the one that communicates
        comm = self.cur.comm_at.get(site)
        if comm is not None and comm.kind == "collective" and comm.via:
            # a wrapped module's forward (DDP, FSDP): one collective on its group, every call
            group = self.wrapped_group(comm.group, e.lineno)
            op = comm.op if comm.op in TRACE_OPS else "all_reduce"
            self.record_on(op, comm.text, group, e.lineno)
            return UNK
        grads = self.cur.backward_at.get(site)
        if grads is not None:
            # `loss.backward()` after a DDP forward: the gradients' all-reduce on its group
            group = self.wrapped_group(grads, e.lineno)
            self.record_on("all_reduce", "backward (all-reduce)", group, e.lineno)
            return UNK
        raise Abort("a call that communicates in a way this rank cannot follow", e.lineno)

    def wrapped_group(self, key: str, line: int) -> Group:
        if key == "WORLD":
            return self.group_of(None, line)
        if key.isidentifier():
            return self.group_of(self.lookup(key, self.env), line)
        raise Abort("a process group this rank cannot know", line)

    def call(self, func: object, args: list, kwargs: dict, e: ast.Call) -> object:
        self.sharded_forward(func, e)
        if isinstance(func, Wrapped):
            inner = func.module
            if isinstance(inner, Obj | Fn | Sequential):
                return self.call(inner, args, kwargs, e)
            return Tensor(None, None)
        if isinstance(func, Fn):
            return self.call_fn(func, args, kwargs, e)
        if isinstance(func, Cls):
            obj = Obj(func)
            init = _class_attr(func, "__init__")
            if isinstance(init, Fn):
                self.call_fn(_bind(init, obj), args, kwargs, e)
            elif func.fields is not None:
                self.dataclass_init(func, obj, args, kwargs, e)
            return obj
        if isinstance(func, Obj):
            meth = _class_attr(func.cls, "__call__") or _class_attr(func.cls, "forward")
            if isinstance(meth, Fn):
                return self.call_fn(_bind(meth, func), args, kwargs, e)
            return self.opaque(e)
        if isinstance(func, Sequential):
            return self.run_sequential(func, args, kwargs, e)
        if isinstance(func, layers.Layer):
            return layers.forward(func, args)
        container = (
            self.ev.table.canonical(func.qname)
            if isinstance(func, Mod) and func.qname.endswith(("Sequential", "ModuleList"))
            else None
        )
        if container in CONTAINERS:
            # modules of the project inside torch's containers keep their forward
            mods = args if container == "torch.nn.Sequential" else (args[:1] or [None])[0]
            if isinstance(mods, list | tuple) and any(
                isinstance(m, Obj | Fn | Sequential) for m in mods
            ):
                return Sequential(list(mods)) if mods is args else list(mods)
            if container == "torch.nn.ModuleList" and isinstance(mods, list | tuple):
                # torch's own modules: opaque, but how many there are is known (a loop over
                # `zip(self.layer_ids, self.blocks)` runs once per block)
                return list(mods)
        if isinstance(func, Mod):
            _handed_over(args, kwargs)
            if not func.qname.startswith(
                ("torch.multiprocessing", "torch.distributed")
            ) and self.hands_over_communication(args, kwargs):
                # `threading.Thread(target=worker)`, `functools.partial(sync)`: the library
                # runs it when, where and as often as it decides
                raise Abort(
                    "a function that communicates is handed to a call it cannot follow", e.lineno
                )
            return self.call_api(func.qname, args, kwargs, e)
        if isinstance(func, Builtin):
            try:
                return func.fn(self, args, kwargs, e)
            except (Abort, Stop, _Return):
                raise
            except Exception:
                return UNK
        if isinstance(func, TensorMethod):
            return _tensor_method(func, args, kwargs)
        if isinstance(func, ShardMethod):
            return self.shard_call(func, args, kwargs, e)
        if isinstance(func, ScheduleMethod):
            return self.schedule_call(func, e, kwargs)
        if isinstance(func, MeshMethod):
            return self.mesh_call(func, args, kwargs, e)
        if isinstance(func, GroupMethod):
            return self.group_method(func, args)
        if isinstance(func, values.ParserMethod):
            return values.call_parser(self, func, args, kwargs)
        if isinstance(func, ExitStackMethod):
            return self.exit_stack_call(func, args, kwargs, e)
        if isinstance(func, WorkMethod):
            if func.attr == "wait":
                self.wait(func.work, e)
                return True
            return UNK
        if isinstance(func, EnvMethod):
            if func.attr == "get" and args:
                v = self.env_var(args[0])
                return v if v is not UNK else (args[1] if len(args) > 1 else UNK)
            return UNK
        if isinstance(func, RankFlag):
            return func.value
        if callable(func) and not isinstance(func, type):
            try:
                if all(_is_known(a) for a in args):
                    return func(*args, **kwargs)
                return _store_unknown(func, args, kwargs)
            except Exception:
                return UNK
        if self.hands_over_communication(args, kwargs):
            # `study.optimize(_objective)`: the callee runs it when and as often as it decides
            raise Abort(
                "a function that communicates is handed to a call it cannot follow", e.lineno
            )
        return self.opaque(e)

    def hands_over_communication(self, args: list, kwargs: dict) -> bool:
        """A function of the program that communicates is among the arguments."""
        return any(
            isinstance(a, Fn) and (a.unit if a.unit is not None else self.ev).communicates(a.node)
            for a in (*args, *kwargs.values())
        )

    def defaults(self, a: ast.arguments, env: dict) -> dict[str, object]:
        out: dict[str, object] = {}
        if not a.defaults and not a.kw_defaults:
            return out  # most functions: nothing to evaluate
        pos = a.posonlyargs + a.args
        for p, d in zip(pos[len(pos) - len(a.defaults) :], a.defaults, strict=True):
            out[p.arg] = self.expr(d, env)
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            if d is not None:
                out[p.arg] = self.expr(d, env)
        return out

    def make_fn(self, s: ast.FunctionDef | ast.AsyncFunctionDef, env: dict, owner: str = "") -> Fn:
        fn = Fn(
            s,
            self.g,
            self.defaults(s.args, env),
            f"{owner}{s.name}",
            unit=self._unit(),
            closure=env if env is not self.g else None,
        )
        for d in s.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
            if name in self.ev.table.rank_zero_decorators:
                fn.only_rank = 0
        return fn

    def make_cls(self, s: ast.ClassDef, env: dict) -> Cls:
        given = [self.expr(x, env) for x in s.bases]
        bases = [b for b in given if isinstance(b, Cls)]
        cls = Cls(s.name, {}, bases)
        if any(
            isinstance(b, Mod) and self.ev.table.canonical(b.qname) in TORCH_MODULES for b in given
        ):
            cls.attrs[TORCH_MODULE] = True
        body_env: dict = {}
        for item in s.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                fn = self.make_fn(item, env, f"{s.name}.")
                names = {
                    d.id if isinstance(d, ast.Name) else getattr(d, "attr", "")
                    for d in item.decorator_list
                }
                if names & {"property", "cached_property"}:
                    cls.attrs[item.name] = Property(fn, "cached_property" in names)
                else:
                    cls.attrs[item.name] = fn
            elif isinstance(item, ast.Assign | ast.AnnAssign):
                try:
                    self.stmt(item, body_env)
                except (Abort, Stop):
                    continue
        for k, v in body_env.items():
            cls.attrs.setdefault(k, v)
        if any(_decorator_name(d) == "dataclass" for d in s.decorator_list):
            cls.fields = self.dataclass_fields(s, bases, env)
        return cls

    def dataclass_fields(self, s: ast.ClassDef, bases: list, env: dict) -> list:
        """The fields of a @dataclass, its bases' first, with their defaults."""
        fields: dict[str, tuple] = {}
        for b in bases:
            for f in b.fields or []:
                fields[f[0]] = f
        for item in s.body:
            if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                continue
            if "ClassVar" in ast.unparse(item.annotation):
                continue
            name, v = item.target.id, item.value
            got: tuple = (name, "none", None)
            try:
                if isinstance(v, ast.Call) and _decorator_name(v) == "field":
                    for kw in v.keywords:
                        if kw.arg == "default":
                            got = (name, "value", self.expr(kw.value, env))
                        elif kw.arg == "default_factory":
                            got = (name, "factory", self.expr(kw.value, env))
                elif v is not None:
                    got = (name, "value", self.expr(v, env))
            except (Abort, Stop):
                got = (name, "value", UNK)
            fields[name] = got
        return list(fields.values())

    def dataclass_init(self, cls: Cls, obj: Obj, args: list, kwargs: dict, e: ast.Call) -> None:
        """The __init__ @dataclass writes: arguments by position, then by name, else the
        field's default or a fresh value of its factory; then __post_init__."""
        for k, (name, kind, value) in enumerate(cls.fields or []):
            if k < len(args):
                v = args[k]
            elif name in kwargs:
                v = kwargs[name]
            elif kind == "factory":
                v = self.call(value, [], {}, e) if value is not UNK else UNK
            elif kind == "value":
                v = value
            else:
                v = UNK
            obj.attrs[name] = v
        post = _class_attr(cls, "__post_init__")
        if isinstance(post, Fn):
            self.call_fn(_bind(post, obj), [], {}, e)

    def call_fn(self, fn: Fn, args: list, kwargs: dict, e: ast.AST) -> object:
        if fn.only_rank is not None and fn.only_rank != self.rank:
            return None
        if self.depth >= MAX_DEPTH:
            raise Abort("calls nested too deeply", getattr(e, "lineno", 0))
        node = fn.node
        a = node.args
        env: dict = dict(fn.closure) if fn.closure else {}
        params = [p.arg for p in a.posonlyargs + a.args]
        if fn.bound is not None:
            args = [fn.bound, *args]
        for k, p in enumerate(params):
            if k < len(args):
                env[p] = args[k]
            elif p in kwargs:
                env[p] = kwargs.pop(p)
            elif p in fn.defaults:
                env[p] = fn.defaults[p]
            else:
                env[p] = UNK
        if a.vararg is not None:
            env[a.vararg.arg] = tuple(args[len(params) :])
        for p in a.kwonlyargs:
            env[p.arg] = kwargs.pop(p.arg) if p.arg in kwargs else fn.defaults.get(p.arg, UNK)
        if a.kwarg is not None:
            env[a.kwarg.arg] = dict(kwargs)
        if isinstance(node, ast.Lambda):
            return self.expr(node.body, env)
        self.depth += 1
        self.stack.append((fn.qualname, self.cur.short, getattr(e, "lineno", 0)))
        self.fn_nodes.append(node)
        outer_yields, self.yields, self.collect_next = self.yields, self.collect_next, None
        outer = self.cur, self.g
        self.cur = fn.unit if fn.unit is not None else self.ev
        self.g = self.globals_of(fn.globals)
        try:
            self.run_block(node.body, env)
        except _Return as r:
            return r.value
        except (_Break, _Continue):
            return None
        except Abort as ab:
            if ab.unit is None and self.cur is not self.ev:
                ab.unit = self.cur  # its lines are that file's
            raise
        finally:
            self.depth -= 1
            self.stack.pop()
            self.fn_nodes.pop()
            self.cur, self.g = outer
            if self.overlays:
                self.g = self.globals_of(self.g)
            self.yields = outer_yields
        return None

    def run_sequential(self, seq: Sequential, args: list, kwargs: dict, e: ast.Call) -> object:
        """`nn.Sequential(...)(x)`: each module's forward in turn, on the previous output (a
        torch module's output is a tensor the evaluator does not follow)."""
        x: object = args[0] if args else UNK
        for m in seq.modules:
            if isinstance(m, Obj | Fn | Sequential):
                x = self.call(m, [x], {}, e)
            elif isinstance(m, layers.Layer):
                x = layers.forward(m, [x])
            else:
                x = Tensor(None, None)
        return x

    def generate(self, fn: Fn) -> list | None:
        """What a generator function (`__iter__` of an IterableDataset) yields, run to its
        end at once; None when it yields nothing knowable or communicates (then the order
        of its communication relative to the loop's would be wrong)."""
        if not any(isinstance(n, ast.Yield | ast.YieldFrom) for n in ast.walk(fn.node)):
            return None
        out: list = []
        before = len(self.actions)
        self.collect_next = out
        try:
            self.call_fn(fn, [], {}, fn.node)
        except (Abort, Stop):
            return None
        finally:
            self.collect_next = None
        if len(self.actions) != before or len(out) > MAX_STEPS:
            del self.actions[before:]
            return None
        return out

    def group_method(self, m: GroupMethod, args: list) -> object:
        g = m.group
        if m.attr == "rank":
            return g.members.index(self.rank) if self.rank in g.members else -1
        if m.attr == "size":
            return len(g.members)
        return UNK


def _handed_over(args: list, kwargs: dict) -> None:
    """Tensors handed to a library call (a collective's buffer, `out=`, `torch.add_`) may be
    written by it: their literal elements are no longer known."""
    for a in [*args, *kwargs.values()]:
        for t in a if isinstance(a, list | tuple) else (a,):
            if isinstance(t, Tensor) and t.values is not None:
                t.forget_values()


def _store_unknown(method: object, args: list, kwargs: dict) -> object:
    """`preds.append(model(x))`: a value the evaluator cannot know still takes its place in
    the list, whose length (`len(preds)`, `for p in preds`) stays known; other calls with an
    unknown argument give an unknown result."""
    owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
    if isinstance(owner, list) and not kwargs:
        if name == "append" and len(args) == 1:
            owner.append(args[0])
            return None
        if name == "insert" and len(args) == 2 and isinstance(args[0], int):
            owner.insert(args[0], args[1])
            return None
    if isinstance(owner, dict) and name == "setdefault" and args and _is_known(args[0]):
        return owner.setdefault(args[0], args[1] if len(args) > 1 else None)
    return UNK


def _decorator_name(d: ast.AST) -> str:
    """`dataclass`, `dataclasses.dataclass`, `dataclass(frozen=True)` -> "dataclass"."""
    if isinstance(d, ast.Call):
        d = d.func
    if isinstance(d, ast.Attribute):
        return d.attr
    return d.id if isinstance(d, ast.Name) else ""
