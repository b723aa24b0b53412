"""Expressions of the per-rank interpreter (`perrank.Rank`): names, operators, comparisons,
subscripts, comprehensions, attributes, and the rank/world/environment values a program
reads.
"""

from __future__ import annotations

import ast

from commlint.lint import perrank_layers as layers
from commlint.lint import perrank_values as values
from commlint.lint.perrank_builtins import BUILTINS, _tensor_binop, _tensor_slice, tensor_element
from commlint.lint.perrank_mesh import DTensorVal, MeshMethod, MeshView
from commlint.lint.perrank_model import (
    BIN_OPS,
    CMP_OPS,
    DTYPES,
    ENVIRON,
    MUTATING,
    P2P,
    PLAIN,
    RANK_ATTRS,
    RANK_ENV,
    RANK_TRUE_ZERO,
    SAFE_METHODS,
    TORCH_MODULE,
    UNK,
    WORLD_ATTRS,
    WORLD_ENV,
    Abort,
    Builtin,
    Cls,
    Derived,
    DType,
    EnvMethod,
    ExitStack,
    ExitStackMethod,
    Fn,
    Group,
    GroupMethod,
    Interval,
    Mod,
    Obj,
    ProjMod,
    Property,
    RankFlag,
    Stop,
    Tensor,
    TensorMethod,
    Unknown,
    Work,
    WorkMethod,
    _bind,
    _class_attr,
    _interval_cmp,
    _is_known,
    _same,
    _Unknowable,
    guard,
)
from commlint.lint.perrank_modules import Wrapped
from commlint.lint.perrank_pipelining import Schedule, ScheduleMethod, Stage


class Expressions:
    """`Rank`'s expressions and attributes."""

    # ------------------------------------------------------------------ expressions
    def expr(self, e: ast.expr | None, env: dict) -> object:
        if e is None:
            return None
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, ast.Name):
            return self.lookup(e.id, env)
        if isinstance(e, ast.BinOp):
            return self.binop(e.op, self.expr(e.left, env), self.expr(e.right, env))
        if isinstance(e, ast.UnaryOp):
            v = self.expr(e.operand, env)
            if isinstance(e.op, ast.Not):
                return (not v) if _is_known(v) else values.derived(self, "not", (v,))
            if isinstance(v, Tensor):
                return v
            if isinstance(v, int | float) and not isinstance(e.op, ast.Invert):
                return -v if isinstance(e.op, ast.USub) else v
            return ~v if isinstance(v, int) else UNK
        if isinstance(e, ast.BoolOp):
            is_and = isinstance(e.op, ast.And)
            result: object = is_and
            for part in e.values:
                v = self.expr(part, env)
                if not _is_known(v):
                    result = values.derived(self, "boolop", (v, result))
                    continue
                if is_and and not v:
                    return v
                if not is_and and v:
                    return v
                if not isinstance(result, Unknown):
                    result = v
            return result
        if isinstance(e, ast.Compare):
            left = self.expr(e.left, env)
            for op, right_node in zip(e.ops, e.comparators, strict=True):
                right = self.expr(right_node, env)
                r = self.compare(op, left, right)
                if isinstance(r, Unknown) or not r:
                    return r
                left = right
            return True
        if isinstance(e, ast.IfExp):
            c = self.expr(e.test, env)
            if isinstance(c, Unknown | Tensor | Interval):
                a, b = self.expr(e.body, env), self.expr(e.orelse, env)
                return a if _same(a, b) else values.derived(self, "ifexp", (c, a, b))
            return self.expr(e.body if self.truth(c, e.test) else e.orelse, env)
        if isinstance(e, ast.Call):
            return self.call_expr(e, env)
        if isinstance(e, ast.Attribute):
            return self.attribute(self.expr(e.value, env), e.attr, e)
        if isinstance(e, ast.Subscript):
            return self.subscript(self.expr(e.value, env), e.slice, env)
        if isinstance(e, ast.List | ast.Tuple | ast.Set):
            vals: list = []
            for x in e.elts:
                if isinstance(x, ast.Starred):
                    inner = self.expr(x.value, env)
                    if not isinstance(inner, list | tuple | range):
                        return UNK
                    vals.extend(inner)
                else:
                    vals.append(self.expr(x, env))
            if isinstance(e, ast.List):
                return vals
            if isinstance(e, ast.Tuple):
                return tuple(vals)
            try:
                return set(vals)
            except TypeError:
                return UNK
        if isinstance(e, ast.Dict):
            d = {}
            for k, v in zip(e.keys, e.values, strict=True):
                if k is None:
                    inner = self.expr(v, env)
                    if isinstance(inner, dict):
                        d.update(inner)
                    continue
                key = self.expr(k, env)
                try:
                    d[key] = self.expr(v, env)
                except TypeError:
                    return UNK
            return d
        if isinstance(e, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            return self.comprehension(e, env)
        if isinstance(e, ast.Lambda):
            closure = env if env is not self.g else None
            defaults = self.defaults(e.args, env)
            return Fn(e, self.g, defaults, "<lambda>", unit=self._unit(), closure=closure)
        if isinstance(e, ast.NamedExpr):
            v = self.expr(e.value, env)
            self.assign(e.target, v, env)
            return v
        if isinstance(e, ast.JoinedStr):
            return self.fstring(e, env)
        if isinstance(e, ast.Starred):
            return self.expr(e.value, env)
        if isinstance(e, ast.Await):
            return self.expr(e.value, env)
        if isinstance(e, ast.Yield | ast.YieldFrom) and self.yields is not None:
            v = self.expr(e.value, env)
            if isinstance(e, ast.Yield):
                self.yields.append(v)
                return None
            items = self.iterate(v, e)
            if items is None:
                raise Abort("a generator that yields from an unknown iterable", e.lineno)
            self.yields.extend(items)
            return None
        return UNK

    def fstring(self, e: ast.JoinedStr, env: dict) -> object:
        """An f-string of known numbers and strings without format specs (`f"layer_{i}"`, a
        key of a dict whose emptiness decides a collective); UNK otherwise."""
        parts = []
        for p in e.values:
            if isinstance(p, ast.Constant) and isinstance(p.value, str):
                parts.append(p.value)
                continue
            if not isinstance(p, ast.FormattedValue) or p.conversion != -1 or p.format_spec:
                return UNK
            v = self.expr(p.value, env)
            if type(v) not in (int, str, bool):
                return UNK
            parts.append(str(v))
        return "".join(parts)

    def lookup(self, name: str, env: dict) -> object:
        if name in env:
            return env[name]
        if name in self.g:
            return self.g[name]
        return BUILTINS.get(name, UNK)

    def binop(self, op: ast.operator, a: object, b: object) -> object:
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            return values.with_origin(self, _tensor_binop(op, a, b), type(op).__name__, (a, b))
        if not _is_known(a, b):
            return values.derived(self, type(op).__name__, (a, b))
        fn = BIN_OPS.get(type(op))
        if fn is None:
            return UNK
        try:
            if isinstance(op, ast.Pow) and isinstance(b, int) and abs(b) > 64:
                return UNK
            if isinstance(op, ast.Mult) and isinstance(a, list | str | tuple) and b > 100_000:
                return UNK
            return fn(a, b)
        except ZeroDivisionError:
            # Python raises here on this rank (a rank whose shard came out empty): a
            # handler around it decides whether the rank skips what follows
            raise Stop("exception", self.line, "ZeroDivisionError") from None
        except Exception:
            return UNK

    def compare(self, op: ast.cmpop, a: object, b: object) -> object:
        if isinstance(op, ast.Is | ast.IsNot):
            if isinstance(a, Unknown) or isinstance(b, Unknown):
                return values.derived(self, type(op).__name__, (a, b))
            if b is None or a is None:
                same = (a is None) == (b is None)
                return same if isinstance(op, ast.Is) else not same
            return UNK
        if isinstance(a, Interval) and isinstance(b, int | float):
            got = _interval_cmp(op, a, b)
        elif isinstance(b, Interval) and isinstance(a, int | float):
            flipped = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE(), ast.Gt: ast.Lt(), ast.GtE: ast.LtE()}
            got = _interval_cmp(flipped.get(type(op), op), b, a)
        else:
            got = None
        if got is UNK:  # undecided by the bounds: computed from where the value came from
            return values.derived(self, type(op).__name__, (a, b))
        if got is not None:
            return got
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            return values.derived(self, type(op).__name__, (a, b))
        if isinstance(op, ast.In | ast.NotIn) and isinstance(b, list | tuple | range | set | dict):
            if not _is_known(a) or any(isinstance(x, Unknown) for x in b):
                return values.derived(self, type(op).__name__, (a, b))
        elif not _is_known(a, b):
            return values.derived(self, type(op).__name__, (a, b))
        try:
            return CMP_OPS[type(op)](a, b)
        except Exception:
            return UNK

    def subscript(self, base: object, sl: ast.expr, env: dict) -> object:
        if isinstance(sl, ast.Slice):
            lo, hi, st = (self.expr(x, env) for x in (sl.lower, sl.upper, sl.step))
            if isinstance(base, Tensor):
                sliced = _tensor_slice(base, lo, hi, st)
                return values.with_origin(self, sliced, "slice", (base, lo, hi, st))
            if isinstance(base, list | tuple | range | str) and _is_known(lo, hi, st):
                try:
                    return base[slice(lo, hi, st)]
                except Exception:
                    return UNK
            return self.selected(base, "slice", (base, lo, hi, st))
        key = self.expr(sl, env)
        if isinstance(base, MeshView):
            return self.submesh(base, key, sl.lineno)
        if isinstance(base, Tensor):
            return values.with_origin(self, tensor_element(base, key), "index", (base, key))
        if base is ENVIRON:
            return self.env_var(key)
        if isinstance(base, list | tuple | range | str | dict) and _is_known(key):
            try:
                return base[key]
            except Exception:
                return UNK
        return self.selected(base, "index", (base, key))

    def selected(self, base: object, label: str, parts: tuple) -> object:
        """Part of an unknown sequence (`torch.linspace(0, 1, n)[rank::2]`): computed from it
        and the index; a part chosen by the rank is this rank's share of the data."""
        got = values.derived(self, label, parts)
        if isinstance(got, Derived):
            self.ev.fps.data.add(got.fp)
        return got

    def comprehension(self, e, env: dict) -> object:
        local = dict(env)
        out: list = []

        def gen(k: int) -> None:
            if k == len(e.generators):
                if isinstance(e, ast.DictComp):
                    out.append((self.expr(e.key, local), self.expr(e.value, local)))
                else:
                    out.append(self.expr(e.elt, local))
                return
            g = e.generators[k]
            items = self.iterate(self.expr(g.iter, local), e)
            if items is None:
                raise _Unknowable
            for x in items:
                self.tick(e.lineno)
                self.assign(g.target, x, local)
                ok = True
                for cond in g.ifs:
                    c = self.expr(cond, local)
                    if not _is_known(c):
                        raise _Unknowable
                    if not c:
                        ok = False
                        break
                if ok:
                    gen(k + 1)

        try:
            gen(0)
        except _Unknowable:
            return UNK
        if isinstance(e, ast.SetComp):
            try:
                return set(out)
            except TypeError:
                return UNK
        if isinstance(e, ast.DictComp):
            try:
                return dict(out)
            except TypeError:
                return UNK
        return out

    def attribute(self, base: object, attr: str, node: ast.AST) -> object:
        if isinstance(base, MeshView):
            return self.mesh_attribute(base, attr)
        if isinstance(base, DTensorVal):
            if attr == "device_mesh" and base.mesh is not None:
                return base.mesh
            return MeshMethod(base, attr)
        if isinstance(base, Schedule):
            return ScheduleMethod(base, attr)
        if isinstance(base, Stage):
            got = base.attribute(attr)
            if got is not None:
                self.ev.rank_read = True
                return got
            return UNK
        if isinstance(base, ProjMod):
            g = self.globals_of(base.globals)
            if attr in g:
                return g[attr]
            sub = self.import_module(f"{base.name}.{attr}", 0)
            return sub if sub is not None else UNK
        if isinstance(base, Mod):
            q = f"{base.qname}.{attr}"
            if q == "os.environ":
                return ENVIRON
            if q.startswith("torch.") and attr in DTYPES:
                return DType(attr)
            return Mod(q)
        if isinstance(base, Obj):
            if attr in base.attrs:
                return base.attrs[attr]
            found = _class_attr(base.cls, attr)
            if isinstance(found, Fn):
                return _bind(found, base)
            if isinstance(found, Property):
                got = self.call_fn(_bind(found.fn, base), [], {}, node)
                if found.cached:
                    guard(base)
                    base.attrs[attr] = got  # as cached_property stores it on the instance
                return got
            if found is not None:
                return found
            sm = self.shard_method(base, attr)
            if sm is not None:
                return sm
            if attr == "training" and _is_torch_module(base.cls):
                return True  # a module trains until `.eval()` (which sets the attribute)
            if attr in ("train", "eval") and _is_torch_module(base.cls):
                return Builtin(_mode_setter(base, attr))
            return self.rank_attribute(attr)
        if isinstance(base, Cls):
            found = _class_attr(base, attr)
            return found if found is not None else UNK
        if isinstance(base, layers.Layer):
            return layers.attribute(base, attr)
        if isinstance(base, Tensor):
            if attr == "shape":
                return tuple(base.shape) if base.shape is not None else UNK
            if attr == "dtype":
                return DType(base.dtype) if base.dtype else UNK
            if attr == "T":
                return Tensor(tuple(reversed(base.shape)) if base.shape else None, base.dtype)
            if attr == "data":
                return base
            if attr == "grad":  # a parameter's gradient has its shape (or is None)
                return Tensor(base.shape, base.dtype)
            return TensorMethod(base, attr)
        if isinstance(base, Group):
            return GroupMethod(base, attr)
        if isinstance(base, Wrapped):
            sm = self.shard_method(base, attr)
            return sm if sm is not None else UNK
        if isinstance(base, values.ArgParser):
            return values.ParserMethod(base, attr)
        if isinstance(base, Work):
            return WorkMethod(base, attr)
        if isinstance(base, ExitStack):
            return ExitStackMethod(base, attr)
        if isinstance(base, P2P) or base is ENVIRON:
            return EnvMethod(attr) if base is ENVIRON else UNK
        if isinstance(base, PLAIN) and not isinstance(base, bool | int | float | type(None)):
            allowed = SAFE_METHODS.get(type(base), set())
            if attr in allowed:
                if attr in MUTATING:
                    guard(base)  # `REGISTRY.append(x)` on a shared module's list
                return getattr(base, attr)
            return UNK
        if base is UNK:
            return self.rank_attribute(attr)
        if isinstance(base, Derived):
            found = self.rank_attribute(attr)
            return found if found is not UNK else values.attribute_of(self, base, attr)
        return UNK

    def rank_attribute(self, attr: str) -> object:
        """An attribute of an object the interpreter does not model, whose name says it holds
        the rank (`trainer.is_world_process_zero`, `state.is_local_process_zero`)."""
        if attr in RANK_TRUE_ZERO:
            self.ev.rank_read = True
            return RankFlag(self.rank == 0)
        if attr in RANK_ATTRS:
            self.ev.rank_read = True
            return self.rank
        if attr in WORLD_ATTRS:
            return self.world
        return UNK

    def env_var(self, key: object) -> object:
        if key in RANK_ENV:
            self.ev.rank_read = True
            return str(self.rank)
        if key in WORLD_ENV:
            return str(self.world)
        if key == "MASTER_ADDR":
            return "127.0.0.1"
        return UNK


def _mode_setter(obj: Obj, attr: str):
    """`model.eval()` / `model.train(mode)`: the module's `training` flag (its submodules'
    too, as torch sets them), returning the module."""

    def f(ev, args: list, kwargs: dict, e: ast.Call) -> object:
        mode = False if attr == "eval" else (args[0] if args else kwargs.get("mode", True))
        if not isinstance(mode, bool):
            mode = UNK
        stack, seen = [obj], set()
        while stack:
            o = stack.pop()
            if id(o) in seen or len(seen) > 1000:
                continue
            seen.add(id(o))
            guard(o)
            o.attrs["training"] = mode
            for v in list(o.attrs.values()):
                for x in v if isinstance(v, list | tuple) else (v,):
                    if isinstance(x, Obj) and _is_torch_module(x.cls):
                        stack.append(x)
        return obj

    return f


def _is_torch_module(cls: Cls) -> bool:
    """The class derives from `torch.nn.Module` (through the project's own classes)."""
    return _class_attr(cls, TORCH_MODULE) is True
