"""Expressions of the extractor (`extract.Extractor`): the value (`Val`) of every expression
but a call, and conditions (`Cond`): which ranks a test is true on, its residue test.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from commlint.lint.extract_agreement import as_condition
from commlint.lint.extract_syntax import (
    _env_key,
    _flip,
    _is_sentinel,
    _is_single_stage_test,
    _target_names,
)
from commlint.lint.extract_values import (
    CLEAN,
    GLOBAL,
    TENSOR_ATTRIBUTES,
    Val,
    _int,
    _mod_test_of,
    join,
    read_tensor,
)
from commlint.lint.ir import Branch, Cond, Loop, Node
from commlint.lint.names import comprehension_scope


class Expressions:
    """`Extractor`'s conditions and expressions (calls apart)."""

    # ----------------------------------------------------------- conditions
    def cond(self, test: cst.BaseExpression) -> Cond:
        v = read_tensor(self.expr(test), self.text(test))
        c = self._cond_from_val(test, v)
        if c.dims and self.cls and isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            target = test.comparisons[0]
            attr = target.comparator
            op = {cst.Equal: "==", cst.NotEqual: "!="}.get(type(target.operator))
            if (
                op is not None
                and isinstance(attr, cst.Attribute)
                and isinstance(attr.value, cst.Name)
                and attr.value.value == "self"
                and self.lookup(f"self.{attr.attr.value}") is None
            ):
                c = replace(c, vs_attr=(op, attr.attr.value, self.cls))
        return c

    def _cond_from_val(self, node: cst.BaseExpression, v: Val) -> Cond:
        true_ranks, false_ranks = self.rank_sets(node)
        mod_test = _mod_test_of(v)
        bare = node
        while isinstance(bare, cst.UnaryOperation) and isinstance(bare.operator, cst.Not):
            bare = bare.expression
        return Cond(
            mod_test=mod_test,
            approx=isinstance(bare, cst.BooleanOperation),
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
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            t, f = self.rank_sets(node.expression)
            return f, t
        if isinstance(node, cst.BooleanOperation):
            lt, lf = self.rank_sets(node.left)
            rt, rf = self.rank_sets(node.right)
            if isinstance(node.operator, cst.And):
                t = lt & rt if lt is not None and rt is not None else (lt if lt is not None else rt)
                f = lf | rf if lf is not None and rf is not None else None
            else:
                t = lt | rt if lt is not None and rt is not None else None
                f = lf & rf if lf is not None and rf is not None else (lf if lf is not None else rf)
            return t, f
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            left, comp = node.left, node.comparisons[0]
            right, op = comp.comparator, comp.operator
            lv = self._peek(left)
            rv = self._peek(right)
            if not (lv.exact and GLOBAL in lv.dims) and rv.exact and GLOBAL in rv.dims:
                left, right, lv, rv = right, left, rv, lv
                op = _flip(op)
            if not (lv.exact and GLOBAL in lv.dims):
                return None, None
            k = _int(right)
            lits = self._literal_ints(right)
            if isinstance(op, cst.Equal) and k is not None:
                return frozenset({k}), None
            if isinstance(op, cst.NotEqual) and k is not None:
                return None, frozenset({k})
            if isinstance(op, cst.In) and lits is not None:
                return frozenset(lits), None
            if isinstance(op, cst.NotIn) and lits is not None:
                return None, frozenset(lits)
            if isinstance(op, cst.LessThan) and k is not None and 0 < k <= 4096:
                return frozenset(range(k)), None
            if isinstance(op, cst.LessThanEqual) and k is not None and 0 <= k < 4096:
                return frozenset(range(k + 1)), None
            if isinstance(op, cst.GreaterThanEqual) and k is not None and 0 < k <= 4096:
                return None, frozenset(range(k))
            if isinstance(op, cst.GreaterThan) and k is not None and 0 <= k < 4096:
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
    def expr(self, node: cst.BaseExpression | None) -> Val:
        if node is None:
            return CLEAN
        meth = getattr(self, f"ex_{type(node).__name__}", None)
        if meth is not None:
            v = meth(node)
        else:
            vals = [self.expr(c) for c in node.children if isinstance(c, cst.BaseExpression)]
            v = join(*vals) if vals else CLEAN
        self._last[id(node)] = (node, v)
        return v

    def ex_Integer(self, node: cst.Integer) -> Val:
        k = _int(node)
        return Val(ints=(k,)) if k is not None else CLEAN

    def ex_UnaryOperation(self, node: cst.UnaryOperation) -> Val:
        k = _int(node)
        if k is not None:
            return Val(ints=(k,))
        v = self.expr(node.expression)
        if isinstance(node.operator, cst.Not):
            v = read_tensor(v, self.text(node.expression))
            mt = _mod_test_of(v)
            flipped = (mt[0], mt[1], not mt[2]) if mt else None
            return replace(join(v), zero=False, guard=v.guard, mod_test=flipped)
        return replace(join(v), tensor=v.rank_tensor)

    def ex_Name(self, node: cst.Name) -> Val:
        v = self.lookup(node.value) or self._getter_group(self.qnames(node))
        if v is not None:
            return v
        return self._name_val(node.value, node.value) or CLEAN

    def ex_Attribute(self, node: cst.Attribute) -> Val:
        key = self.text(node)
        v = self.lookup(key) or self._getter_group(self.qnames(node))
        if v is not None:
            return v
        base = self.expr(node.value)
        attr = node.attr.value
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

    def ex_Subscript(self, node: cst.Subscript) -> Val:
        key = self.text(node)
        env_name = _env_key(key)
        if env_name is not None:
            return self._env_val(env_name, key)
        base = self.expr(node.value)
        idx: list[Val] = []
        for el in node.slice:
            if isinstance(el.slice, cst.Index):
                # `parts[rank]`: this rank's element of a list built the same way everywhere;
                # its properties are usually uniform (a slice `data[rank::world]` is not)
                v = self.expr(el.slice.value)
                idx.append(Val(data=v.data, origin=v.origin) if v.data else CLEAN)
            elif isinstance(el.slice, cst.Slice):
                idx.extend(self.expr(x) for x in (el.slice.lower, el.slice.upper, el.slice.step))
        if (base.mesh is not None or "mesh" in self.text(node.value).lower()) and len(
            node.slice
        ) == 1:
            sl = node.slice[0].slice
            if isinstance(sl, cst.Index) and isinstance(sl.value, cst.SimpleString):
                dim = sl.value.evaluated_value
                return Val(mesh=base.mesh or ((), ()), submesh=str(dim))
        if base.ints is not None and idx and idx[0].ints and len(idx[0].ints) == 1:
            i = idx[0].ints[0]
            if -len(base.ints) <= i < len(base.ints):
                return Val(ints=(base.ints[i],))
        if base.uniform:
            return base
        return replace(join(base, *idx), tensor=base.rank_tensor)

    def _env_val(self, name: str, text: str) -> Val:
        if name in self.table.rank_env:
            return Val(
                dims=frozenset({GLOBAL}),
                exact=name == "RANK",
                origin=f"`{text}` is the launcher's {name}",
            )
        return CLEAN

    def ex_List(self, node) -> Val:
        vals = [self.expr(e.value) for e in node.elements if isinstance(e, cst.Element)]
        if vals and all(v.ints is not None and len(v.ints) == 1 for v in vals):
            return Val(ints=tuple(v.ints[0] for v in vals))
        if vals and all(v.group for v in vals):
            return Val(typ="group-list")
        return join(*vals) if vals else Val(ints=())

    ex_Tuple = ex_List
    ex_Set = ex_List

    def ex_Comparison(self, node: cst.Comparison) -> Val:
        if len(node.comparisons) == 1 and _is_sentinel(node.comparisons[0]):
            # `LOCAL_RANK != -1`, `rank is None`: "was a rank given?" is the same on all ranks
            self.expr(node.left)
            return CLEAN
        left = self.expr(node.left)
        vals = [left]
        guard = None
        for comp in node.comparisons:
            right = self.expr(comp.comparator)
            vals.append(right)
            if isinstance(comp.operator, cst.In) and left.dims:
                guard = "*"
        v = join(*vals)
        return replace(
            v,
            guard=guard or next((x.guard for x in vals if x.guard), None),
            tensor=any(x.rank_tensor for x in vals),
            mod_test=self._mod_test(node, vals),
        )

    def _mod_test(self, node: cst.Comparison, vals: list[Val]) -> tuple[int, int, bool] | None:
        """`rank % k == a` / `a != rank % k` / `stage == a` with `stage = rank % k`."""
        if len(node.comparisons) != 1 or len(vals) != 2:
            return None
        op = node.comparisons[0].operator
        if not isinstance(op, cst.Equal | cst.NotEqual):
            return None
        a, b = vals
        if a.rank_mod is None:
            a, b = b, a
        if a.rank_mod is None or b.rank_mod is not None or not b.ints or len(b.ints) != 1:
            return None
        k, r = a.rank_mod, b.ints[0]
        if not 0 <= r < k:
            return (k, 0, False) if isinstance(op, cst.NotEqual) else None
        return (k, r, isinstance(op, cst.Equal))

    def ex_BinaryOperation(self, node: cst.BinaryOperation) -> Val:
        left, right = self.expr(node.left), self.expr(node.right)
        v = join(left, right)
        if (
            isinstance(node.operator, cst.Modulo)
            and left.exact
            and GLOBAL in left.dims
            and right.ints
            and len(right.ints) == 1
            and right.ints[0] > 0
        ):
            return replace(v, rank_mod=right.ints[0])
        return replace(v, tensor=left.rank_tensor or right.rank_tensor)

    def ex_BooleanOperation(self, node) -> Val:
        if isinstance(node.operator, cst.And) and _is_single_stage_test(node):
            return CLEAN  # first and last pipeline stage at once: pipeline size 1, everywhere
        a = read_tensor(self.expr(node.left), self.text(node.left))
        b = read_tensor(self.expr(node.right), self.text(node.right))
        v = join(a, b)
        return replace(v, guard=a.guard or b.guard)

    def ex_IfExp(self, node: cst.IfExp) -> Val:
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

    def ex_SimpleString(self, node) -> Val:
        return CLEAN

    def ex_FormattedString(self, node) -> Val:
        vals = [
            self.expr(p.expression)
            for p in node.parts
            if isinstance(p, cst.FormattedStringExpression)
        ]
        return join(*vals) if vals else CLEAN

    def _comprehension(self, node) -> Val:
        fors = []
        f = node.for_in
        vals = []
        outer = self.scope
        while f is not None:
            it = self.expr(f.iter)
            if f is node.for_in:  # the first iterable is the enclosing scope's
                self.scope = comprehension_scope(outer, _target_names(node.for_in))
            self.bind(f.target, replace(it, stride=None))
            vals.append(it)
            fors.append(f)
            for cond in f.ifs:
                vals.append(self.expr(cond.test))
            f = f.inner_for_in
        saved = self.out
        body: list[Node] = []
        self.out = body
        if isinstance(node, cst.DictComp):
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
        if isinstance(node, cst.ListComp | cst.GeneratorExp) and not v.tainted():
            elt = self._peek(node.elt) if not isinstance(node, cst.DictComp) else CLEAN
            if elt.group:
                return Val(typ="group-list")
        if not isinstance(node, cst.DictComp) and not v.tainted():
            stride = self._comprehension_stride(node)
            if stride is not None:
                return replace(v, stride=stride)
        return v

    def _comprehension_stride(self, node) -> tuple[int, int | None] | None:
        """`[r for r in range(world_size) if r % k == a]`: the ranks ≡ a (mod k)."""
        f = node.for_in
        if f.inner_for_in is not None or not isinstance(f.target, cst.Name):
            return None
        var = f.target.value
        if not (isinstance(node.elt, cst.Name) and node.elt.value == var):
            return None
        it = f.iter
        if not (isinstance(it, cst.Call) and self.text(it.func) == "range"):
            return None
        base = self._peek(it).stride
        if base is None and len(it.args) == 3:
            return None  # a step that is not a literal
        stride = base
        for c in f.ifs:
            test = c.test
            if not (
                isinstance(test, cst.Comparison)
                and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.Equal)
                and isinstance(test.left, cst.BinaryOperation)
                and isinstance(test.left.operator, cst.Modulo)
                and isinstance(test.left.left, cst.Name)
                and test.left.left.value == var
            ):
                return None
            k = self._peek(test.left.right).ints
            a = self._peek(test.comparisons[0].comparator).ints
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
