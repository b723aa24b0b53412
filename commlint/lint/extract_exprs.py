"""Expressions of the extractor (`extract.Extractor`): the value (`Val`) of every expression
but a call, and conditions (`Cond`): which ranks a test is true on, its residue test.
"""

from __future__ import annotations

import ast

from commlint.lint.extract_agreement import as_condition
from commlint.lint.extract_syntax import (
    _env_key,
    _flip,
    _is_sentinel,
    _is_single_stage_test,
    _name_of,
    _target_names,
)
from commlint.lint.extract_values import (
    CLEAN,
    GLOBAL,
    TENSOR_ATTRIBUTES,
    Val,
    _int,
    _mod_test_of,
    evolve,
    join,
    read_tensor,
)
from commlint.lint.ir import Branch, Cond, Loop, Node
from commlint.lint.names import comprehension_scope


class Expressions:
    """`Extractor`'s conditions and expressions (calls apart)."""

    # ----------------------------------------------------------- conditions
    def cond(self, test: ast.expr) -> Cond:
        v = read_tensor(self.expr(test), self.text(test))
        c = self._cond_from_val(test, v)
        if c.dims and self.cls and isinstance(test, ast.Compare) and len(test.ops) == 1:
            attr = test.comparators[0]
            op = {ast.Eq: "==", ast.NotEq: "!="}.get(type(test.ops[0]))
            if (
                op is not None
                and isinstance(attr, ast.Attribute)
                and isinstance(attr.value, ast.Name)
                and attr.value.id == "self"
                and self.lookup(f"self.{attr.attr}") is None
            ):
                c = evolve(c, vs_attr=(op, attr.attr, self.cls))
        return c

    def _cond_from_val(self, node: ast.expr, v: Val) -> Cond:
        true_ranks, false_ranks = self.rank_sets(node)
        mod_test = _mod_test_of(v)
        bare = node
        while isinstance(bare, ast.UnaryOp) and isinstance(bare.op, ast.Not):
            bare = bare.operand
        return Cond(
            mod_test=mod_test,
            approx=isinstance(bare, ast.BoolOp),
            text=self.text(node)[:80],
            pos=self.pos(node),
            dims=v.dims,
            data=v.data and not v.uniform,
            origin=v.origin,
            guard=v.guard,
            true_ranks=true_ranks,
            false_ranks=false_ranks,
            deps=v.deps,
            agreed_if=as_condition(v.agreed) if v.data and not v.dims else None,
        )

    def rank_sets(self, node) -> tuple[frozenset[int] | None, frozenset[int] | None]:
        """Global ranks for which `node` is true / false, when a finite set is evident."""
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            t, f = self.rank_sets(node.operand)
            return f, t
        if isinstance(node, ast.BoolOp):
            # `a and b and c` is `(a and b) and c`
            lt, lf = self.rank_sets(node.values[0])
            conj = isinstance(node.op, ast.And)
            for value in node.values[1:]:
                rt, rf = self.rank_sets(value)
                if conj:
                    t = (
                        lt & rt
                        if lt is not None and rt is not None
                        else (lt if lt is not None else rt)
                    )
                    f = lf | rf if lf is not None and rf is not None else None
                else:
                    t = lt | rt if lt is not None and rt is not None else None
                    f = (
                        lf & rf
                        if lf is not None and rf is not None
                        else (lf if lf is not None else rf)
                    )
                lt, lf = t, f
            return lt, lf
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right, op = node.left, node.comparators[0], node.ops[0]
            lv = self._peek(left)
            rv = self._peek(right)
            if not (lv.exact and GLOBAL in lv.dims) and rv.exact and GLOBAL in rv.dims:
                left, right, lv, rv = right, left, rv, lv
                op = _flip(op)
            if not (lv.exact and GLOBAL in lv.dims):
                return None, None
            k = _int(right)
            lits = self._literal_ints(right)
            if isinstance(op, ast.Eq) and k is not None:
                return frozenset({k}), None
            if isinstance(op, ast.NotEq) and k is not None:
                return None, frozenset({k})
            if isinstance(op, ast.In) and lits is not None:
                return frozenset(lits), None
            if isinstance(op, ast.NotIn) and lits is not None:
                return None, frozenset(lits)
            if isinstance(op, ast.Lt) and k is not None and 0 < k <= 4096:
                return frozenset(range(k)), None
            if isinstance(op, ast.LtE) and k is not None and 0 <= k < 4096:
                return frozenset(range(k + 1)), None
            if isinstance(op, ast.GtE) and k is not None and 0 < k <= 4096:
                return None, frozenset(range(k))
            if isinstance(op, ast.Gt) and k is not None and 0 <= k < 4096:
                return None, frozenset(range(k + 1))
            return None, None
        v = self._peek(node)
        if v.zero:
            return frozenset({0}), None
        return None, None

    def _peek(self, node) -> Val:
        """The value of an expression already evaluated (no new communication recorded)."""
        seen = self._last.get(id(node))
        if seen is not None and seen[0] is node:
            # Its value from the evaluation that just ran: evaluating again would double the
            # work per level of nested calls (each call peeks at its arguments).
            return seen[1]
        saved = self.out
        self.out = []
        try:
            return self.expr(node)
        finally:
            self.out = saved

    def _literal_ints(self, node) -> tuple[int, ...] | None:
        v = self._peek(node)
        return v.ints

    # ----------------------------------------------------------- expressions
    def expr(self, node: ast.expr | None) -> Val:
        if node is None:
            return CLEAN
        meth = self._dispatch.get(type(node))
        if meth is not None:
            v = meth(self, node)
        else:
            vals = [self.expr(c) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
            v = join(*vals) if vals else CLEAN
        self._last[id(node)] = (node, v)
        return v

    def ex_Constant(self, node: ast.Constant) -> Val:
        k = _int(node)
        if k is not None:
            return Val(ints=(k,))
        name = _name_of(node)  # `None`, `True`, `False`: names, as LibCST read them
        if name is not None:
            return self.lookup(name) or CLEAN
        return CLEAN

    def ex_UnaryOp(self, node: ast.UnaryOp) -> Val:
        k = _int(node)
        if k is not None:
            return Val(ints=(k,))
        v = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            v = read_tensor(v, self.text(node.operand))
            mt = _mod_test_of(v)
            flipped = (mt[0], mt[1], not mt[2]) if mt else None
            return evolve(join(v), zero=False, guard=v.guard, mod_test=flipped)
        return evolve(join(v), tensor=v.rank_tensor)

    def ex_Name(self, node: ast.Name) -> Val:
        v = self.lookup(node.id) or self._getter_group(self.qnames(node))
        if v is not None:
            return v
        return self._name_val(node.id, node.id) or CLEAN

    def ex_Attribute(self, node: ast.Attribute) -> Val:
        key = self.text(node)
        v = self.lookup(key) or self._getter_group(self.qnames(node))
        if v is not None:
            return v
        base = self.expr(node.value)
        attr = node.attr
        if base.mesh is not None and attr in ("shape", "ndim", "mesh_dim_names"):
            return CLEAN
        nv = self._name_val(attr, key)
        if nv is not None:
            return nv
        if base.uniform:
            return base
        if base.rank_tensor and attr in TENSOR_ATTRIBUTES:
            return base
        return join(base)

    def _getter_group(self, names: list[str]) -> Val | None:
        """The group a configured group getter names (`mpu.get_data_parallel_group`)."""
        for q in names:
            g = self.table.group_getter(q)
            if g:
                return Val(group=g["group"])
        return None

    def _subscript_elements(self, node: ast.Subscript) -> list[ast.expr]:
        """The elements of `x[a, b:c]` (one for `x[(a, b)]`)."""
        sl = node.slice
        if isinstance(sl, ast.Tuple) and self._src.syntactic(sl) == self._src.span(sl):
            return list(sl.elts)  # not parenthesised
        return [sl]

    def ex_Subscript(self, node: ast.Subscript) -> Val:
        key = self.text(node)
        env_name = _env_key(key)
        if env_name is not None:
            return self._env_val(env_name, key)
        base = self.expr(node.value)
        idx: list[Val] = []
        elements = self._subscript_elements(node)
        for el in elements:
            if isinstance(el, ast.Slice):
                idx.extend(self.expr(x) for x in (el.lower, el.upper, el.step))
            elif not isinstance(el, ast.Starred):
                # `parts[rank]`: this rank's element of a list built the same way everywhere;
                # its properties are usually uniform (a slice `data[rank::world]` is not)
                v = self.expr(el)
                idx.append(Val(data=v.data, origin=v.origin) if v.data else CLEAN)
        if (base.mesh is not None or "mesh" in self.text(node.value).lower()) and len(
            elements
        ) == 1:
            sl = elements[0]
            if isinstance(sl, ast.Constant) and isinstance(sl.value, str | bytes):
                return Val(mesh=base.mesh or ((), ()), submesh=str(sl.value))
        if base.ints is not None and idx and idx[0].ints and len(idx[0].ints) == 1:
            i = idx[0].ints[0]
            if -len(base.ints) <= i < len(base.ints):
                return Val(ints=(base.ints[i],))
        if base.uniform:
            return base
        return evolve(join(base, *idx), tensor=base.rank_tensor)

    def _env_val(self, name: str, text: str) -> Val:
        if name in self.table.rank_env:
            return Val(
                dims=frozenset({GLOBAL}),
                exact=name == "RANK",
                origin=f"`{text}` is the launcher's {name}",
            )
        return CLEAN

    def ex_List(self, node) -> Val:
        vals = [self.expr(e) for e in node.elts if not isinstance(e, ast.Starred)]
        if vals and all(v.ints is not None and len(v.ints) == 1 for v in vals):
            return Val(ints=tuple(v.ints[0] for v in vals))
        if vals and all(v.group for v in vals):
            return Val(typ="group-list")
        return join(*vals) if vals else Val(ints=())

    ex_Tuple = ex_List
    ex_Set = ex_List

    def ex_Dict(self, node) -> Val:
        return CLEAN  # (its keys and values are not looked into)

    def ex_YieldFrom(self, node) -> Val:
        return CLEAN

    def ex_NamedExpr(self, node: ast.NamedExpr) -> Val:
        vals = [self.expr(node.target), self.expr(node.value)]
        return join(*vals)

    def ex_Compare(self, node: ast.Compare) -> Val:
        if len(node.ops) == 1 and _is_sentinel(node.ops[0], node.comparators[0]):
            # `LOCAL_RANK != -1`, `rank is None`: "was a rank given?" is the same on all ranks
            self.expr(node.left)
            return CLEAN
        left = self.expr(node.left)
        vals = [left]
        guard = None
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self.expr(comparator)
            vals.append(right)
            if isinstance(op, ast.In) and left.dims:
                guard = "*"
        v = join(*vals)
        return evolve(
            v,
            guard=guard or next((x.guard for x in vals if x.guard), None),
            tensor=any(x.rank_tensor for x in vals),
            mod_test=self._mod_test(node, vals),
        )

    def _mod_test(self, node: ast.Compare, vals: list[Val]) -> tuple[int, int, bool] | None:
        """`rank % k == a` / `a != rank % k` / `stage == a` with `stage = rank % k`."""
        if len(node.ops) != 1 or len(vals) != 2:
            return None
        op = node.ops[0]
        if not isinstance(op, ast.Eq | ast.NotEq):
            return None
        a, b = vals
        if a.rank_mod is None:
            a, b = b, a
        if a.rank_mod is None or b.rank_mod is not None or not b.ints or len(b.ints) != 1:
            return None
        k, r = a.rank_mod, b.ints[0]
        if not 0 <= r < k:
            return (k, 0, False) if isinstance(op, ast.NotEq) else None
        return (k, r, isinstance(op, ast.Eq))

    def ex_BinOp(self, node: ast.BinOp) -> Val:
        left, right = self.expr(node.left), self.expr(node.right)
        v = join(left, right)
        if (
            isinstance(node.op, ast.Mod)
            and left.exact
            and GLOBAL in left.dims
            and right.ints
            and len(right.ints) == 1
            and right.ints[0] > 0
        ):
            return evolve(v, rank_mod=right.ints[0])
        return evolve(v, tensor=left.rank_tensor or right.rank_tensor)

    def ex_BoolOp(self, node: ast.BoolOp) -> Val:
        # `a and b and c` is `(a and b) and c`: the pairs from the left
        values = node.values
        conj = isinstance(node.op, ast.And)
        acc: Val | None = None
        for k in range(1, len(values)):
            right = values[k]
            if k == 1:
                if conj and _is_single_stage_test(values[0], right):
                    # first and last pipeline stage at once: pipeline size 1, everywhere
                    acc = CLEAN
                    continue
                a = read_tensor(self.expr(values[0]), self.text(values[0]))
            else:
                a = read_tensor(acc, "")  # a pair's value: never a rank's tensor
            b = read_tensor(self.expr(right), self.text(right))
            acc = evolve(join(a, b), guard=a.guard or b.guard)
        return acc if acc is not None else CLEAN

    def ex_IfExp(self, node: ast.IfExp) -> Val:
        cond = self.cond(node.test)
        body_out: list[Node] = []
        else_out: list[Node] = []
        saved = self.out
        self._enter(cond, True)
        self.out = body_out
        a = self.expr(node.body)
        self._leave(cond)
        self._enter(cond, False)
        self.out = else_out
        b = self.expr(node.orelse)
        self._leave(cond)
        self.out = saved
        if body_out or else_out:
            self.emit(Branch(cond, [body_out, else_out], self.pos(node.test), "ternary"))
        v = join(a, b, self._peek(node.test))
        if a.group and a.group == b.group:
            return a
        return v

    def ex_Lambda(self, node) -> Val:
        return CLEAN

    def ex_JoinedStr(self, node: ast.JoinedStr) -> Val:
        vals = [self.expr(p.value) for p in node.values if isinstance(p, ast.FormattedValue)]
        return join(*vals) if vals else CLEAN

    def _comprehension(self, node) -> Val:
        fors = node.generators
        vals = []
        outer = self.scope
        for f in fors:
            it = self.expr(f.iter)
            if f is fors[0]:  # the first iterable is the enclosing scope's
                self.scope = comprehension_scope(outer, _target_names(fors))
            self.bind(f.target, evolve(it, stride=None))
            vals.append(it)
            for cond in f.ifs:
                vals.append(self.expr(cond))
        saved = self.out
        body: list[Node] = []
        self.out = body
        if isinstance(node, ast.DictComp):
            self.expr(node.key)
            vals.append(self.expr(node.value))
        else:
            vals.append(self.expr(node.elt))
        self.out = saved
        self.scope = outer
        if body:
            it = join(*vals[:1])
            cond = self._cond_from_val(fors[0].iter, it) if it.tainted() else None
            self.emit(Loop(cond, body, self.pos(fors[0].iter), "comprehension"))
        v = join(*vals)
        if isinstance(node, ast.ListComp | ast.GeneratorExp) and not v.tainted():
            elt = self._peek(node.elt)
            if elt.group:
                return Val(typ="group-list")
        if not isinstance(node, ast.DictComp) and not v.tainted():
            stride = self._comprehension_stride(node)
            if stride is not None:
                return evolve(v, stride=stride)
        return v

    def _comprehension_stride(self, node) -> tuple[int, int | None] | None:
        """`[r for r in range(world_size) if r % k == a]`: the ranks ≡ a (mod k)."""
        if len(node.generators) != 1:
            return None
        f = node.generators[0]
        if not isinstance(f.target, ast.Name):
            return None
        var = f.target.id
        if not (isinstance(node.elt, ast.Name) and node.elt.id == var):
            return None
        it = f.iter
        if not (isinstance(it, ast.Call) and self.text(it.func) == "range"):
            return None
        base = self._peek(it).stride
        if base is None and len(it.args) + len(it.keywords) == 3:
            return None  # a step that is not a literal
        stride = base
        for test in f.ifs:
            if not (
                isinstance(test, ast.Compare)
                and len(test.ops) == 1
                and isinstance(test.ops[0], ast.Eq)
                and isinstance(test.left, ast.BinOp)
                and isinstance(test.left.op, ast.Mod)
                and isinstance(test.left.left, ast.Name)
                and test.left.left.id == var
            ):
                return None
            k = self._peek(test.left.right).ints
            a = self._peek(test.comparators[0]).ints
            if not k or not a or len(k) != 1 or len(a) != 1 or k[0] <= 1:
                return None
            if not 0 <= a[0] < k[0]:
                return None
            new = (k[0], a[0])
            if stride is not None and stride not in ((1, 0), new):
                return None
            stride = new
        return stride

    ex_ListComp = _comprehension
    ex_SetComp = _comprehension
    ex_GeneratorExp = _comprehension
    ex_DictComp = _comprehension
