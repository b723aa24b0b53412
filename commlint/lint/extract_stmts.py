"""Statements of the extractor (`extract.Extractor`): blocks, assignments and what they bind,
`if`/`match` arms under their rank conditions, loops, `with`, `try`, nested functions and
classes (queued for later), and the async handles a statement leaves unused.
"""

from __future__ import annotations

import ast

from commlint.lint.extract_syntax import (
    _assigned_names,
    _decided_by_world_size,
    _int_class_attributes,
    _iterates_a_set,
    _kwarg,
    _lone_call,
    _name_of,
    _swallows_oom,
)
from commlint.lint.extract_values import (
    CLEAN,
    CONCAT_CALLS,
    CONSTANT_TENSOR,
    DTYPE_METHODS,
    EXACT_RANK_NAMES,
    GLOBAL,
    PAD_CALLS,
    SAME_PAYLOAD_METHODS,
    ZERO_NAMES,
    Val,
    _ClassEnv,
    _is_dtype,
    evolve,
    join,
)
from commlint.lint.ir import AsyncFact, Branch, Comm, Cond, Exit, Loop, Node, Pos, Try
from commlint.lint.source_map import call_args


class Statements:
    """`Extractor`'s statements, control flow and binding."""

    # ---------------------------------------------------------- statements
    def block(self, stmts) -> list[Node]:
        out: list[Node] = []
        saved = getattr(self, "out", None)
        self.out = out
        for stmt in stmts:
            self.statement(stmt)
        self.out = saved
        return out

    def emit(self, node: Node) -> None:
        self.out.append(node)

    def statement(self, stmt: ast.stmt) -> None:
        self.stmt_line = stmt.lineno
        meth = self._stmt_dispatch.get(type(stmt))
        if meth is not None:
            meth(self, stmt)

    def stmt_Expr(self, s: ast.Expr) -> None:
        before = len(self.out)
        self.expr(s.value)
        if isinstance(s.value, ast.Call):
            whole = self.pos(s.value)
            for n in self.out[before:]:
                if (
                    isinstance(n, Comm)
                    and not n.blocking
                    and n.kind != "create"
                    and (n.pos.line, n.pos.col) == (whole.line, whole.col)
                ):
                    self._async_fact(n, "discarded")

    def stmt_Assign(self, s: ast.Assign) -> None:
        if self._assign_pairwise(s):
            return
        before = len(self.out)
        self._current_target = self.text(s.targets[0]) if len(s.targets) == 1 else None
        v = self.expr(s.value)
        self._current_target = None
        made = self._payload_of(s.value)
        if made is not None:
            v = evolve(v, payload=made)
        if (
            v.loop_group
            and isinstance(s.value, ast.Name)
            and len(s.targets) == 1
            and isinstance(s.targets[0], ast.Name | ast.Attribute)
        ):
            # `for ranks in ...: group = new_group(ranks); if rank in ranks: tp = group`:
            # `group` names a new group on every iteration; `tp` names the one kept
            v = evolve(v, group=self.text(s.targets[0]), loop_group=False)
        for t in s.targets:
            self.bind(t, v)
        self._track_async(s.value, list(s.targets), before)

    def stmt_AnnAssign(self, s: ast.AnnAssign) -> None:
        if s.value is None:
            return
        before = len(self.out)
        v = self.expr(s.value)
        self.bind(s.target, v)
        self._track_async(s.value, [s.target], before)

    def stmt_AugAssign(self, s: ast.AugAssign) -> None:
        v = join(self.expr(s.value), self.expr(s.target))
        self.bind(s.target, v)

    def stmt_Return(self, s: ast.Return) -> None:
        if s.value is not None:
            self.returns.append(self.expr(s.value))
        self.emit(Exit("return", self.pos(s), "return"))

    def stmt_Raise(self, s: ast.Raise) -> None:
        if s.exc is not None:
            self.expr(s.exc)
        self.emit(Exit("raise", self.pos(s), self.statement_text(s)))

    def stmt_Break(self, s: ast.Break) -> None:
        self.emit(Exit("break", self.pos(s), "break"))

    def stmt_Continue(self, s: ast.Continue) -> None:
        self.emit(Exit("continue", self.pos(s), "continue"))

    def _payload_root(self, expr: ast.expr) -> str | None:
        """The variable a tensor expression views or copies (`g.flatten()` -> `g`)."""
        while (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in SAME_PAYLOAD_METHODS
        ):
            expr = expr.func.value
        if isinstance(expr, ast.Name | ast.Attribute):
            return self.text(expr)
        return None

    def _payload_of(self, value: ast.expr) -> tuple[str, str] | None:
        """`buf = t.to(torch.float64)` / `t.double()`: t with another dtype; `torch.cat([t,
        pad])` / `F.pad(t, ...)`: t with more elements. What a collective's buffer is made
        from, to compare the buffers that the arms of a rank branch pass."""
        if not isinstance(value, ast.Call):
            return None
        func = value.func
        args = call_args(value)
        if isinstance(func, ast.Attribute):
            root = self._payload_root(func.value)
            meth = func.attr
            if root is not None and meth in DTYPE_METHODS and not args:
                return (root, f"dtype {DTYPE_METHODS[meth]}")
            if root is not None and meth == "to":
                arg = _kwarg(value, "dtype", None)
                if arg is None:
                    arg = next(
                        (
                            a.value
                            for a in args
                            if a.keyword is None and _is_dtype(self.text(a.value))
                        ),
                        None,
                    )
                if arg is not None:
                    return (root, f"dtype {self.text(arg)}")
        names = set(self.qnames(func))
        if names & PAD_CALLS and args:
            root = self._payload_root(args[0].value)
            return (root, "size") if root else None
        if names & CONCAT_CALLS and args:
            parts = args[0].value
            if isinstance(parts, ast.List | ast.Tuple) and len(parts.elts) >= 2:
                first = parts.elts[0]
                first = first.value if isinstance(first, ast.Starred) else first
                root = self._payload_root(first)
                return (root, "size") if root else None
        return None

    def _track_async(self, value, targets, before: int) -> None:
        if not isinstance(value, ast.Call):
            return
        comms = [n for n in self.out[before:] if isinstance(n, Comm)]
        if not comms or comms[-1].blocking or comms[-1].kind == "create":
            return
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            fact = AsyncFact(comms[-1].op, comms[-1].text, comms[-1].pos, "unused")
            self.async_pending.append((targets[0].id, fact))

    def _async_fact(self, n: Comm, status: str) -> None:
        self.facts.async_facts.append(AsyncFact(n.op, n.text, n.pos, status))

    def stmt_FunctionDef(self, node: ast.FunctionDef) -> None:
        prefix = self.qualprefix
        if self.cls and not prefix:
            prefix = self.cls.split(".", 1)[1] + "." if "." in self.cls else ""
        env = self.env if self.env is not self.module_env else self.module_env
        self._queue_function(node, prefix, env, self.cls)

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def stmt_ClassDef(self, node: ast.ClassDef) -> None:
        qual = f"{self.qualprefix}{node.name}"
        class_key = f"{self.module_name}.{qual}"
        cenv = self.class_envs.setdefault(class_key, {})
        bases = [b.value if isinstance(b, ast.Starred) else b for b in node.bases]
        for base in bases:
            for q in self.qnames(base):
                typ = self.table.module_base(q)
                if typ:
                    self.lightning_classes.add(class_key)
            if self.text(base).rsplit(".", 1)[-1] == "LightningModule":
                self.lightning_classes.add(class_key)
        base_names = tuple(q for base in bases for q in self.qnames(base))
        consts = _int_class_attributes(node)
        if base_names or consts:
            self.facts.classes[class_key] = (base_names, consts)
        methods = [s for s in node.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)]
        methods.sort(key=lambda f: f.name not in ("__init__", "setup"))
        env = _ClassEnv(self.module_env, cenv)
        if self.env is not self.module_env:
            # a class made inside a function: its methods read that function's variables
            # (`probe_gen` seeded from the rank before `class Module(LightningModule)`)
            env.outer = self.env
        for m in methods:
            self.pending.append((m, qual + ".", env, class_key))

    def stmt_If(self, node: ast.If) -> None:
        cond = self.cond(node.test)
        fixed = self._fixed_value(cond)
        if fixed is None:
            fixed = _decided_by_world_size(node.test, self.text)
        arms: list[list[Node]] = []
        payloads = {k: v.payload for k, v in self.env.items()}
        arms.append(self.arm(node.body, cond, True))
        # one environment runs through both arms; what the first arm made of a buffer
        # (`v = torch.cat([v, pad])`) does not hold in the second
        for k, v in list(self.env.items()):
            if v.payload != payloads.get(k):
                self.env[k] = evolve(v, payload=payloads.get(k))
        if not node.orelse:
            arms.append([])
        elif self._src.is_elif(node):
            arms.append(self.arm(node.orelse, cond, False))
        else:
            arms.append(self.arm(node.orelse, cond, False))
        if fixed is not None:
            for n in arms[0 if fixed else 1]:  # the other arm is dead on every rank here
                self.emit(n)
            return
        if cond.data:
            self._implicit_flow(node, cond)
        elif cond.dims:
            self._rank_flow(node, cond)
        self.emit(Branch(cond, arms, self.pos(node.test), "if"))

    def _rank_flow(self, node: ast.If, cond: Cond) -> None:
        """A name or `self` attribute set in an arm of a branch on the rank holds what the
        rank decided: `if rank == 0 and val < best: best_epoch = epoch` leaves the other
        ranks' `best_epoch` behind, whatever the value set is. A value made the same on
        every rank by a collective afterwards is a new value and loses this."""
        origin = f"set only where `{cond.text[:40]}` (line {cond.pos.line}) holds: {cond.origin}"
        for name in _assigned_names([node], attrs=True):
            v = self.env.get(name)
            if v is None or v.tainted() or v.uniform or v.group or v.mesh or v.typ:
                continue
            v = evolve(v, dims=cond.dims, origin=origin, agreed=None)
            self.env[name] = v
            if name.startswith("self.") and isinstance(self.env, _ClassEnv):
                self.env.cls[name] = v

    def _implicit_flow(self, node: ast.If, cond: Cond) -> None:
        """A name set in an arm of a branch on this rank's data (`if val < best: bad = 0
        else: bad += 1`) holds what that data decided, whatever value it is set to: a patience
        counter of an un-reduced validation loss differs between ranks."""
        names = _assigned_names([node])
        why = cond.origin or "depends on data"
        origin = f"set under `{cond.text[:40]}` (line {cond.pos.line}): {why}"
        for name in names:
            v = self.env.get(name)
            if v is not None and not v.data and not v.uniform:
                self.env[name] = evolve(v, data=True, origin=origin, agreed=None)

    def arm(self, stmts, cond: Cond, truth: bool | None) -> list[Node]:
        self._enter(cond, truth)
        try:
            return self.block(stmts)
        finally:
            self._leave(cond)

    def _fixed_value(self, cond: Cond) -> bool | None:
        """The value of a rank condition when it is the same on every rank that can reach
        it (`if is_main_process():` inside the odd-rank arm of `if rank % 2 == 0:`); None when
        it can differ."""
        if cond.data or not cond.dims:
            return None
        rank_set, excluded, _ = self._restriction()
        mods = [m for m in self.mod_restrict if m is not None]
        if rank_set is None and excluded is None and not mods:
            return None

        def reachable(r: int) -> bool:
            if rank_set is not None and r not in rank_set:
                return False
            if excluded is not None and r in excluded:
                return False
            return all((r % k == a) == holds for k, a, holds in mods)

        def unreachable(ranks: frozenset[int]) -> bool:
            return not any(reachable(r) for r in ranks)

        if cond.true_ranks is not None and unreachable(cond.true_ranks):
            return False
        if cond.false_ranks is not None and unreachable(cond.false_ranks):
            return True
        return None

    def _enter(self, cond: Cond, truth: bool | None) -> None:
        mt = cond.mod_test if not cond.data else None
        self.mod_restrict.append(
            (mt[0], mt[1], mt[2] == truth) if mt is not None and truth is not None else None
        )
        # an and/or's rank sets are supersets: fine as "only these ranks get here", not as
        # "these ranks never get here"
        if truth is True:
            excluded = None if cond.approx else cond.false_ranks
            self.restrict.append((cond.true_ranks, excluded, cond))
        elif truth is False:
            excluded = None if cond.approx else cond.true_ranks
            self.restrict.append((cond.false_ranks, excluded, cond))
        else:
            self.restrict.append((None, None, cond))
        if cond.divergent:
            self.divergent_depth += 1

    def _leave(self, cond: Cond) -> None:
        self.mod_restrict.pop()
        self.restrict.pop()
        if cond.divergent:
            self.divergent_depth -= 1

    def stmt_Match(self, node: ast.Match) -> None:
        v = self.expr(node.subject)
        cond = self._cond_from_val(node.subject, v)
        arms = [self.arm(case.body, cond, None) for case in node.cases]
        if not any(
            isinstance(c.pattern, ast.MatchAs) and c.pattern.pattern is None for c in node.cases
        ):
            arms.append([])
        self.emit(Branch(cond, arms, self.pos(node.subject), "match"))

    def stmt_For(self, node: ast.For) -> None:
        it = self.expr(node.iter)
        self.bind(node.target, evolve(it, stride=None, module_ref=()))
        root = _root_name(node.iter)
        target = node.target
        if isinstance(target, ast.Tuple) and len(target.elts) == 2:
            target = target.elts[1]  # `for i, block in enumerate(model.layers)`
            if isinstance(target, ast.Starred):
                target = target.value
        if isinstance(target, ast.Name) and root is not None:
            # `for block in model.layers: fully_shard(block)` wraps blocks of `model`
            self.loop_roots[target.id] = root
        cond = self._cond_from_val(node.iter, it) if it.tainted() else None
        body = self._loop_body(cond, node.body)
        unordered = self.text(node.iter)[:60] if _iterates_a_set(node.iter) else None
        self.emit(Loop(cond, body, self.pos(node.iter), "for", unordered))
        if node.orelse:
            for n in self.block(node.orelse):
                self.emit(n)

    stmt_AsyncFor = stmt_For

    def stmt_While(self, node: ast.While) -> None:
        c = self.cond(node.test)
        cond = c if c.divergent else None
        body = self._loop_body(cond, node.body)
        self.emit(Loop(cond, body, self.pos(node.test), "while"))

    def _loop_body(self, cond: Cond | None, stmts) -> list[Node]:
        """A loop's body, under its rank-dependent condition (if any)."""
        if cond is not None:
            self._enter(cond, None)
        self.loop_depth += 1
        body = self.block(stmts)
        self.loop_depth -= 1
        if cond is not None:
            self._leave(cond)
        return body

    def stmt_With(self, node: ast.With) -> None:
        quiet: list[str] = []
        methods: list[tuple[str, str, str]] = []
        for item in node.items:
            v = self.expr(item.context_expr)
            if item.optional_vars is not None:
                self.bind(item.optional_vars, v)
            # `with model.no_sync():` — DDP skips the gradient all-reduce of the
            # forward/backward made inside (gradient accumulation); so does a framework's
            # context (`with accelerator.no_sync(model):` for `accelerator.backward`)
            models, quiets = self.no_sync_context(item.context_expr)
            quiet.extend(models)
            methods.extend(quiets)
        stack = self.__dict__.setdefault("no_sync", [])
        stack.extend(quiet)
        quiet_methods = self.quiet_methods()
        quiet_methods.extend(methods)
        try:
            for n in self.block(node.body):
                self.emit(n)
        finally:
            del stack[len(stack) - len(quiet) :]
            del quiet_methods[len(quiet_methods) - len(methods) :]

    stmt_AsyncWith = stmt_With

    def stmt_Try(self, node: ast.Try) -> None:
        risks: list[tuple[str, Pos, str]] = []
        frames = self.__dict__.setdefault("try_frames", [])
        frames.append(risks)
        try:
            body = self.block(node.body)
        finally:
            frames.pop()
        handlers: list[list[Node]] = []
        types: list[str] = []
        for h in node.handlers:
            if h.name is not None:
                self.env[h.name] = CLEAN
            hbody = self.block(h.body)
            exc = self.text(h.type) if h.type is not None else ""
            if "StopIteration" in exc:
                cond = Cond(
                    text=f"except {exc}",
                    pos=self.pos(h),
                    data=True,
                    origin="the iterator is exhausted after a number of items that can "
                    "differ between ranks",
                )
                body.append(Branch(cond, [hbody, []], self.pos(h), "exhaustion"))
            elif _swallows_oom(exc, self._src.segment(h.body[0], h.body[-1])) and any(
                isinstance(n, Exit) and n.kind in ("continue", "break", "return") for n in hbody
            ):
                # `except torch.cuda.OutOfMemoryError: continue` — memory runs out on one rank
                # (more data, more activations), which then skips the step's collectives
                cond = Cond(
                    text=f"except {exc}",
                    pos=self.pos(h),
                    data=True,
                    origin="running out of memory depends on each rank's own data and device",
                )
                body.append(Branch(cond, [hbody, []], self.pos(h), "oom"))
            else:
                handlers.append(hbody)
                types.append(exc)
        orelse = self.block(node.orelse) if node.orelse else []
        final = self.block(node.finalbody) if node.finalbody else []
        lone = _lone_call(node.body)
        risky = tuple(risks[:8])
        self.emit(Try(body, handlers, orelse, final, self.pos(node), lone, risky, tuple(types)))

    # ----------------------------------------------------------- binding
    def _assign_pairwise(self, s: ast.Assign) -> bool:
        """`rank, world = dist.get_rank(), dist.get_world_size()`: each name gets its own
        value (binding the joined tuple to both would make `world` depend on the rank)."""
        value = s.value
        if len(s.targets) != 1 or not isinstance(value, ast.Tuple | ast.List):
            return False
        target = s.targets[0]
        if not isinstance(target, ast.Tuple | ast.List):
            return False
        pairs = list(zip(target.elts, value.elts, strict=False))
        if len(target.elts) != len(value.elts) or any(
            not isinstance(t, ast.Name) or isinstance(e, ast.Starred) for t, e in pairs
        ):
            return False
        vals = [self.expr(e) for _, e in pairs]
        for (t, _), v in zip(pairs, vals, strict=True):
            self.bind(t, v)
        return True

    def bind(self, target: ast.expr, v: Val) -> None:
        name = _name_of(target)
        if name is not None:
            self.env[name] = v
        elif isinstance(target, ast.Attribute):
            key = self.text(target)
            if key.startswith("self.") and isinstance(self.env, _ClassEnv):
                self.env.cls[key] = v
            self.env[key] = v
        elif isinstance(target, ast.Tuple | ast.List):
            for k, el in enumerate(target.elts):
                if not isinstance(el, ast.Starred):
                    sub = v
                    if v.typ and k > 0:
                        sub = evolve(v, typ=None)
                    self.bind(el, sub)
        elif isinstance(target, ast.Subscript):
            self.expr(target.value)
            base = target.value
            if isinstance(base, ast.Name):
                old = self.env.get(base.id)
                if old is not None and old.origin == CONSTANT_TENSOR:
                    self.env[base.id] = CLEAN  # `stop[0] = flag`: values of this rank now
                elif v.agreeing and not v.tainted() and (old is None or not old.tainted()):
                    # `tokens[:, pos] = sampled` of a broadcast: agreed if the rest was
                    self.env[base.id] = join(old or CLEAN, v)

    def lookup(self, key: str) -> Val | None:
        return self.env.get(key)

    def _name_val(self, name: str, text: str) -> Val | None:
        if name in self.table.rank_attributes or name in self.table.rank_helpers:
            exact = name in EXACT_RANK_NAMES
            return Val(
                dims=frozenset({GLOBAL}),
                exact=exact,
                zero=bool(ZERO_NAMES.search(name)) and "local" not in name,
                origin=f"`{text}` names a rank",
            )
        return None


def _root_name(expr: ast.expr) -> ast.Name | None:
    """The variable an iterable of modules hangs off: `model` of `model`, `model.layers`,
    `model.layers[:4]`, `model.children()`, `enumerate(model.blocks)` (its first argument)."""
    while True:
        if isinstance(expr, ast.Name):
            return expr
        if isinstance(expr, ast.Attribute | ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call):
            if isinstance(expr.func, ast.Attribute):
                expr = expr.func.value
            elif isinstance(expr.func, ast.Name) and expr.func.id == "enumerate":
                args = call_args(expr)
                if not args:
                    return None
                expr = args[0].value
            else:
                return None
        else:
            return None
