"""Statements of the per-rank interpreter (`perrank.Rank`): the budget and the truth of a
condition, blocks, assignments, `with`, `try`, loops, and the imports of the project's own
modules (followed files are interpreted too).
"""

from __future__ import annotations

import ast
import contextlib

from commlint.lint import perrank_values as values
from commlint.lint.perrank_model import (
    DICT_VIEWS,
    MAX_STEPS,
    MAX_WORK,
    SHARED,
    UNK,
    Abort,
    Cls,
    ExitStack,
    ExitStackMethod,
    Fn,
    Interval,
    Mod,
    Obj,
    ProjMod,
    Raised,
    Stop,
    Tensor,
    Unknown,
    Work,
    _bind,
    _Break,
    _class_attr,
    _Continue,
    _is_known,
    _load,
    _Return,
    guard,
)
from commlint.lint.perrank_modules import calls_sharded


class Statements:
    """`Rank`'s statements, control flow and imports."""

    # ------------------------------------------------------------------ helpers
    def tick(self, line: int) -> None:
        self.steps += 1
        self.ev.work += 1
        self.line = line
        if self.steps > MAX_STEPS or self.ev.work > MAX_WORK:
            raise Abort("evaluation budget exhausted", line)

    def truth(self, v: object, node: ast.AST) -> bool:
        line = getattr(node, "lineno", 0)
        if isinstance(v, Unknown | Tensor | Interval | Mod | Work):
            if line in self.cur.uniform_lines:
                # the same on every rank (neither rank nor data decides it): every rank takes
                # the arm that communicates; what the other arm does is not proved absent
                self.ev.approx = True
                fp = values.fp_of(self, v, line)
                if fp is not None:  # the ranks' origins are compared after the run
                    self.assumed.setdefault((id(self.cur), line), (self.cur, fp))
                return True
            forced = self.forced(v, line)
            if forced is not None:
                return forced
            raise Abort("a condition whose value this rank cannot know", line, v)
        try:
            b = bool(v)
        except Exception:
            raise Abort("a condition whose value this rank cannot know", line) from None
        self.decided.setdefault(line, set()).add(b)
        return b

    def forced(self, v: object, line: int) -> bool | None:
        """A test of an unknown value proved the same on every rank (made only of collectives'
        results and constants): while the world size is explored arm by arm
        (`FileEval.explore`), the arm this path takes; None when it is not explored so."""
        plan = self.ev.plan
        if plan is None:
            return None
        fp = values.fp_of(self, v)
        if fp is None or not self.ev.fps.uniform(fp):
            return None
        unit = self._unit()
        site = (getattr(unit, "path", None), line)
        k = self.fork_seen.get(site, 0)
        self.fork_seen[site] = k + 1
        key = (*site, k)
        self.forks.append((key, fp))
        if key not in plan:
            self.ev.need = key  # this path stops here; the explorer tries both arms
            raise Abort("a uniform value to decide", line)
        return plan[key]

    # ------------------------------------------------------------------ statements
    def run_block(self, stmts: list[ast.stmt], env: dict) -> None:
        for s in stmts:
            self.stmt(s, env)

    def stmt(self, s: ast.stmt, env: dict) -> None:
        self.tick(s.lineno)
        kind = type(s)
        # the top levels of followed modules are mostly imports and definitions: tested first
        if kind is ast.ImportFrom:
            self.import_from(s, env)
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            env[s.name] = self.make_fn(s, env)
        elif isinstance(s, ast.Expr):
            self.expr(s.value, env)
        elif isinstance(s, ast.Assign):
            v = self.expr(s.value, env)
            for t in s.targets:
                self.assign(t, v, env)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.assign(s.target, self.expr(s.value, env), env)
        elif isinstance(s, ast.AugAssign):
            cur = self.expr(_load(s.target), env)
            if isinstance(cur, Tensor):
                cur.forget_values()  # `t += 1` writes into the tensor every alias sees
            v = self.binop(s.op, cur, self.expr(s.value, env))
            self.assign(s.target, v, env)
        elif isinstance(s, ast.If):
            c = self.expr(s.test, env)
            if isinstance(c, Unknown | Tensor | Interval) and not self.cur.communicates(s):
                # an arm that leaves the loop or function decides what follows: explored
                forced = self.forced(c, s.test.lineno) if _exits(s) else None
                if forced is None:
                    self.forget(s, env, c, s.test.lineno)
                    return
                self.run_block(s.body if forced else s.orelse, env)
                return
            self.run_block(s.body if self.truth(c, s.test) else s.orelse, env)
        elif isinstance(s, ast.For | ast.AsyncFor):
            self.for_loop(s, env)
        elif isinstance(s, ast.While):
            self.while_loop(s, env)
        elif isinstance(s, ast.Break | ast.Continue | ast.Return | ast.Raise):
            self.exit_stmt(s, env)
        elif isinstance(s, ast.Assert):
            c = self.expr(s.test, env)
            if _is_known(c) and not c:
                raise Stop("exception", s.lineno, "AssertionError")
        elif isinstance(s, ast.Try):
            self.try_stmt(s, env)
        elif isinstance(s, ast.With | ast.AsyncWith):
            for item in s.items:
                ctx = item.context_expr
                f = ctx.func if isinstance(ctx, ast.Call) else ctx
                if (getattr(f, "attr", None) or getattr(f, "id", None)) in ("join", "Join"):
                    # DDP's join shadows the collectives of ranks that ran out of inputs
                    raise Abort("uneven inputs under a join context", s.lineno)
            self.with_items(s, list(s.items), env)
        elif isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef):
            env[s.name] = self.make_fn(s, env)
        elif isinstance(s, ast.ClassDef):
            env[s.name] = self.make_cls(s, env)
        elif isinstance(s, ast.Import):
            for a in s.names:
                if a.asname:
                    env[a.asname] = self.import_module(a.name, 0) or Mod(a.name)
                else:
                    top = a.name.split(".")[0]
                    self.import_module(a.name, 0)  # runs its top level, as Python does
                    env[top] = self.import_module(top, 0) or Mod(top)
        elif isinstance(s, ast.ImportFrom):
            self.import_from(s, env)
        elif isinstance(s, ast.Global | ast.Nonlocal):
            env.setdefault("__globals_names__", set()).update(s.names)
        elif isinstance(s, ast.Pass | ast.Delete):
            return
        else:
            if self.cur.communicates(s):
                raise Abort(f"`{type(s).__name__}` statement", s.lineno)
            self.forget(s, env)

    def exit_stmt(self, s: ast.Break | ast.Continue | ast.Return | ast.Raise, env: dict) -> None:
        if self.cur is self.ev:
            self.ev.recorded_lines.add(s.lineno)  # an exit that ran (where CL103 points)
        if isinstance(s, ast.Break):
            raise _Break
        if isinstance(s, ast.Continue):
            raise _Continue
        if isinstance(s, ast.Return):
            raise _Return(self.expr(s.value, env) if s.value is not None else None)
        name, message = "", None
        if s.exc is not None:
            e = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
            name = e.id if isinstance(e, ast.Name) else getattr(e, "attr", "")
            if isinstance(s.exc, ast.Call) and len(s.exc.args) == 1 and not s.exc.keywords:
                message = self._message(s.exc.args[0], env)
        raise Stop("exception", s.lineno, name, message)

    def _message(self, e: ast.expr, env: dict) -> str | None:
        """An exception's message when this rank knows all of it; None otherwise."""
        v = self.expr(e, env)
        return v if isinstance(v, str) else None

    def with_items(self, s: ast.With | ast.AsyncWith, items: list, env: dict) -> None:
        """`with A() as a, B():` — a context manager of the project's classes runs its
        `__enter__` and `__exit__` (a collective in `__exit__` runs on the ranks that entered)."""
        if not items:
            self.run_block(s.body, env)
            return
        item, rest = items[0], items[1:]
        v = self.expr(item.context_expr, env)
        if isinstance(v, ExitStack):
            if item.optional_vars is not None:
                self.assign(item.optional_vars, v, env)
            try:
                self.with_items(s, rest, env)
            except Stop as stop:
                if stop.kind == "exception":
                    self.unwind(v)
                raise
            self.unwind(v)
            return
        enter = _class_attr(v.cls, "__enter__") if isinstance(v, Obj) else None
        leave = _class_attr(v.cls, "__exit__") if isinstance(v, Obj) else None
        got = (
            self.call_fn(_bind(enter, v), [], {}, item.context_expr) if isinstance(enter, Fn) else v
        )
        if item.optional_vars is not None:
            self.assign(item.optional_vars, got if isinstance(got, Obj) else UNK, env)
        if not isinstance(leave, Fn):
            self.with_items(s, rest, env)
            return
        try:
            self.with_items(s, rest, env)
        except Stop as stop:
            if stop.kind != "exception":
                raise
            # `__exit__(exc_type, exc, tb)`: an exception, so neither is None
            exc = Raised(stop.exc, stop.message) if stop.exc else UNK
            if self.call_fn(_bind(leave, v), [exc, exc, UNK], {}, item.context_expr) is not True:
                raise
            return
        self.call_fn(_bind(leave, v), [None, None, None], {}, item.context_expr)

    def exit_stack_call(self, m: ExitStackMethod, args: list, kwargs: dict, e: ast.Call) -> object:
        """`stack.callback(fn, *args)`, `stack.push(exit_fn)`, `stack.enter_context(cm)`,
        `stack.close()`."""
        if m.attr == "callback" and args:
            m.stack.callbacks.append((args[0], list(args[1:]), dict(kwargs), e))
            return args[0]
        if m.attr == "push" and args:
            m.stack.callbacks.append((args[0], [None, None, None], {}, e))
            return args[0]
        if m.attr == "enter_context" and args:
            cm = args[0]
            enter = _class_attr(cm.cls, "__enter__") if isinstance(cm, Obj) else None
            leave = _class_attr(cm.cls, "__exit__") if isinstance(cm, Obj) else None
            got = self.call_fn(_bind(enter, cm), [], {}, e) if isinstance(enter, Fn) else UNK
            if isinstance(leave, Fn):
                m.stack.callbacks.append((_bind(leave, cm), [None, None, None], {}, e))
            return got
        if m.attr == "close":
            self.unwind(m.stack)
            return None
        if m.attr == "pop_all":
            moved = ExitStack(list(m.stack.callbacks))
            m.stack.callbacks.clear()
            return moved
        return UNK

    def unwind(self, stack: ExitStack) -> None:
        """The registered callbacks, last first, each as called where it was registered."""
        while stack.callbacks:
            fn, args, kwargs, e = stack.callbacks.pop()
            site = ast.Call(func=e.args[0] if e.args else e.func, args=[], keywords=[])
            ast.copy_location(site, e)
            site.end_lineno, site.end_col_offset = e.end_lineno, e.end_col_offset
            self.call(fn, list(args), dict(kwargs), site)

    # ------------------------------------------------------------------ the project's modules
    def _unit(self) -> object | None:
        return None if self.cur is self.ev else self.cur

    def import_module(self, name: str, level: int) -> ProjMod | None:
        """The project module an import names, its top level run by this rank once; None
        when it is not a file of this run (or it could not be followed): then it stays an
        opaque `Mod`, as every library does."""
        index = self.ev.modules_index
        if index is None:
            return None
        cur_module = getattr(self.cur, "module", self.ev.facts.module)
        target = index.find(self.cur.path, cur_module, name, level)
        if target is None:
            return None
        if target in self.modules:
            return self.modules[target]
        unit = index.unit(target, lambda short: short == self.ev.short)
        if unit is None or unit.path == self.ev.path:
            self.modules[target] = None
            return None
        templates = self.ev.templates
        if templates is not None:
            shared, got = templates.instantiate(self, target)
            if shared:
                return got
        mod = ProjMod(target, {"__name__": target})
        self.modules[target] = mod  # a circular import sees the part already run
        outer = self.cur, self.g
        self.cur, self.g = unit, mod.globals
        try:
            self.run_block(unit.tree.body, mod.globals)
        except (Abort, Stop, _Return, _Break, _Continue):
            self.modules[target] = None  # its top level cannot be followed: opaque
            return None
        finally:
            self.cur, self.g = outer
            if self.overlays:
                self.g = self.globals_of(self.g)
        return mod

    def import_from(self, s: ast.ImportFrom, env: dict) -> None:
        base = s.module or ""
        mod = self.import_module(base, s.level) if (base or s.level) else None
        for a in s.names:
            if a.name == "*":
                if mod is not None:
                    g = self.globals_of(mod.globals)
                    env.update({k: v for k, v in g.items() if not k.startswith("_")})
                continue
            sub = self.import_module(f"{base}.{a.name}" if base else a.name, s.level)
            if sub is not None:
                v: object = sub
            elif mod is not None:
                v = self.globals_of(mod.globals).get(a.name, UNK)
            elif s.level:
                v = UNK  # a relative import of a file this run does not have
            else:
                v = Mod(f"{base}.{a.name}" if base else a.name)
            env[a.asname or a.name] = v

    def forget(self, s: ast.AST, env: dict, cond: object = UNK, cond_line: int = 0) -> None:
        """A statement skipped because its path is unknown: what it assigns becomes unknown
        (computed from the condition, when the condition's origin is known)."""
        value = values.under(self, cond, cond_line) if cond is not UNK else UNK
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                env[n.id] = value
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                base = env.get(n.value.id) if isinstance(n.value, ast.Name) else None
                if isinstance(base, Obj):
                    guard(base)
                    base.attrs[n.attr] = value
            elif isinstance(n, ast.Return | ast.Break | ast.Continue | ast.Raise):
                sharded = False
                if self.fn_nodes and not self.cur.communicates(self.fn_nodes[-1]):
                    sharded = calls_sharded(self.fn_nodes[-1], env)
                    if not sharded:
                        raise _Return(UNK)  # whatever it returns, it communicates nothing
                ab = Abort(
                    "an exit whose condition this rank cannot know", n.lineno, cond, cond_line
                )
                ab.sharded = sharded
                raise ab

    def try_stmt(self, s: ast.Try, env: dict) -> None:
        try:
            try:
                self.run_block(s.body, env)
            except Stop as stop:
                handler = self.handler_for(s, stop)
                if handler is None:
                    raise
                if handler.name:
                    env[handler.name] = Raised(stop.exc, stop.message) if stop.exc else UNK
                self.run_block(handler.body, env)
            else:
                self.run_block(s.orelse, env)
        finally:
            if s.finalbody:
                self.run_block(s.finalbody, env)

    def handler_for(self, s: ast.Try, stop: Stop) -> ast.ExceptHandler | None:
        if stop.kind != "exception":
            return None
        for h in s.handlers:
            names = []
            if h.type is None:
                return h
            for t in h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]:
                names.append(t.id if isinstance(t, ast.Name) else getattr(t, "attr", ""))
            if {"Exception", "BaseException", stop.exc} & set(names):
                return h
        return None

    def for_loop(self, s: ast.For | ast.AsyncFor, env: dict) -> None:
        it = self.expr(s.iter, env)
        items = self.iterate(it, s)
        if items is None:
            if not self.cur.communicates(s):
                self.forget(s, env)
                return
            # an iterable of unknown length (a data loader): every rank takes the body once,
            # the taint rules judge whether the count can differ between ranks
            items = [values.element(self, it, 0)]
            self.ev.approx = True
        elif isinstance(it, set | frozenset) and any(isinstance(x, str) for x in it):
            before = len(self.actions)
            self._loop(s, env, items)
            if len(self.actions) > before:
                self.ev.note_set_loop(s)
            return
        self._loop(s, env, items)

    def _loop(self, s: ast.For | ast.AsyncFor, env: dict, items: list) -> None:
        counts = self.trips.setdefault(s.lineno, []) if self.cur is self.ev else []
        counts.append(0)
        for x in items:
            self.tick(s.lineno)
            counts[-1] += 1
            self.assign(s.target, x, env)
            try:
                self.run_block(s.body, env)
            except _Break:
                return
            except _Continue:
                continue
        self.run_block(s.orelse, env)

    def while_loop(self, s: ast.While, env: dict) -> None:
        while True:
            c = self.expr(s.test, env)
            if isinstance(c, Unknown | Tensor | Interval):
                if not self.cur.communicates(s):
                    self.forget(s, env, c, s.lineno)
                    return
                raise Abort("a `while` loop whose bound this rank cannot know", s.lineno, c)
            if not self.truth(c, s.test):
                break
            self.tick(s.lineno)
            try:
                self.run_block(s.body, env)
            except _Break:
                return
            except _Continue:
                continue
        self.run_block(s.orelse, env)

    def iterate(self, it: object, node: ast.AST) -> list | None:
        if isinstance(it, DICT_VIEWS):  # `for name, p in params.items()`
            it = list(it)
        if isinstance(it, list | tuple | range | str | dict | set | frozenset):
            if len(it) > MAX_STEPS:
                raise Abort("a loop too long to unroll", node.lineno)
            if isinstance(it, set | frozenset):
                return sorted(it, key=repr)
            return list(it)
        if hasattr(it, "modules") and isinstance(getattr(it, "modules", None), list):
            return list(it.modules)  # `for block in model:` over a torch.nn.Sequential
        if isinstance(it, Tensor) and it.shape:
            rows = [Tensor(it.shape[1:], it.dtype) for _ in range(it.shape[0])]
            return [values.with_origin(self, t, ("row", k), (it,)) for k, t in enumerate(rows)]
        return None

    def assign(self, target: ast.expr, v: object, env: dict) -> None:
        if isinstance(target, ast.Name):
            names = env.get("__globals_names__")
            if names and target.id in names:
                g = self.g
                if id(g) in SHARED.ids:
                    g = self.own_globals(g)  # a shared module's global: this rank's copy
                g[target.id] = v
            else:
                env[target.id] = v
        elif isinstance(target, ast.Tuple | ast.List):
            elts = target.elts
            vals: list | None = None
            if isinstance(v, list | tuple | range) and not any(
                isinstance(e, ast.Starred) for e in elts
            ):
                vals = list(v) if len(v) == len(elts) else None
            for k, e in enumerate(elts):
                if isinstance(e, ast.Starred):
                    self.assign(e.value, UNK, env)
                else:
                    self.assign(e, vals[k] if vals is not None else values.element(self, v, k), env)
        elif isinstance(target, ast.Attribute):
            base = self.expr(target.value, env)
            if isinstance(base, Obj | Cls):
                guard(base)
                base.attrs[target.attr] = v
        elif isinstance(target, ast.Subscript):
            base = self.expr(target.value, env)
            key = self.expr(target.slice, env)
            if isinstance(base, Tensor):
                base.forget_values()
            if isinstance(base, list | dict) and _is_known(key):
                guard(base)
                with contextlib.suppress(IndexError, TypeError, KeyError):
                    base[key] = v
            elif isinstance(base, dict) and isinstance(target.value, ast.Name | ast.Attribute):
                # a key this rank cannot know: the dict now holds something, but what is unknown
                self.assign(target.value, UNK, env)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, UNK, env)


def _exits(s: ast.If) -> bool:
    """The `if` holds a `return`, `break`, `continue` or `raise`."""
    return any(
        isinstance(n, ast.Return | ast.Break | ast.Continue | ast.Raise) for n in ast.walk(s)
    )
