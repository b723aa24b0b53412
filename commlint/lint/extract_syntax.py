"""Questions about LibCST syntax that the extractor (`extract.Extractor`) asks without its
environment: a call's argument by keyword or position, the names a block assigns, whether a
test is decided by the world size, whether a loop iterates a set, a class's integer constants.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import libcst as cst

from commlint.lint.extract_values import WORLD_SIZE_TEXT, _int


def _is_single_stage_test(node: cst.BooleanOperation) -> bool:
    names = set()
    for side in (node.left, node.right):
        if not isinstance(side, cst.Call):
            return False
        f = side.func
        names.add(f.attr.value if isinstance(f, cst.Attribute) else getattr(f, "value", ""))
    return names == {"is_pipeline_first_stage", "is_pipeline_last_stage"}


def _is_sentinel(comp: cst.ComparisonTarget) -> bool:
    if not isinstance(comp.operator, cst.Equal | cst.NotEqual | cst.Is | cst.IsNot):
        return False
    c = comp.comparator
    return (isinstance(c, cst.Name) and c.value == "None") or _int(c) == -1


def _spec(raw):
    if raw is None:
        return None
    if isinstance(raw, tuple):
        return raw
    pos, kw = raw
    return (pos, kw)


def _kwarg(node: cst.Call, kw: str | None, pos: int | None) -> cst.BaseExpression | None:
    for a in node.args:
        if a.keyword is not None and kw is not None and a.keyword.value == kw:
            return a.value
    if pos is not None:
        positional = [a for a in node.args if a.keyword is None and not a.star]
        if pos < len(positional):
            return positional[pos].value
    return None


def _flip(op):
    flips = {
        cst.LessThan: cst.GreaterThan,
        cst.GreaterThan: cst.LessThan,
        cst.LessThanEqual: cst.GreaterThanEqual,
        cst.GreaterThanEqual: cst.LessThanEqual,
    }
    for a, b in flips.items():
        if isinstance(op, a):
            return b()
    return op


def _env_key(text: str) -> str | None:
    m = re.fullmatch(r"os\.environ\[\s*['\"]([A-Z_]+)['\"]\s*\]", text)
    return m.group(1) if m else None


class _NameCounter(cst.CSTVisitor):
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def visit_Name(self, node: cst.Name) -> None:
        self.counts[node.value] += 1


def _name_counts(node: cst.CSTNode) -> Counter[str]:
    v = _NameCounter()
    node.visit(v)
    return v.counts


def _swallows_oom(exc: str, handler: str) -> bool:
    """An `except` for running out of memory: `OutOfMemoryError` / `MemoryError`, or a
    `RuntimeError` whose handler tests for "out of memory" (torch before 1.13)."""
    return "MemoryError" in exc or ("RuntimeError" in exc and "out of memory" in handler.lower())


def _lone_call(stmts: Sequence[cst.BaseStatement]) -> bool:
    """One simple statement that is a call, or assigns a call's result, and nothing else."""
    if len(stmts) != 1 or not isinstance(stmts[0], cst.SimpleStatementLine):
        return False
    if len(stmts[0].body) != 1:
        return False
    small = stmts[0].body[0]
    if not isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)):
        return False
    value = small.value
    if not isinstance(value, cst.Call):
        return False
    # arguments that are names, attributes or literals cannot fail on their own
    simple = (cst.Name, cst.Attribute, cst.Integer, cst.Float, cst.SimpleString)
    return all(isinstance(a.value, simple) for a in value.args)


_COMPARE = {
    cst.GreaterThan: lambda a, b: a > b,
    cst.GreaterThanEqual: lambda a, b: a >= b,
    cst.LessThan: lambda a, b: a < b,
    cst.LessThanEqual: lambda a, b: a <= b,
    cst.Equal: lambda a, b: a == b,
    cst.NotEqual: lambda a, b: a != b,
}


def _decided_by_world_size(test: cst.BaseExpression, text) -> bool | None:
    """`world_size > 1` (`args.world_size`, `dist.get_world_size()`) compared with a literal:
    its value whenever communication can go wrong, i.e. on every world size of 2 or more (a
    single rank has nobody to mismatch with); None when that value depends on the size."""
    negate = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negate = test.expression, not negate
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    left, comp = test.left, test.comparisons[0]
    fn = _COMPARE.get(type(comp.operator))
    right = comp.comparator
    if fn is None:
        return None
    if isinstance(right, cst.Integer) and WORLD_SIZE_TEXT.search(text(left)):
        k = int(right.evaluated_value)
        values = {fn(w, k) for w in (2, 3, max(k, 2) + 1, 1 << 20)}
    elif isinstance(left, cst.Integer) and WORLD_SIZE_TEXT.search(text(right)):
        k = int(left.evaluated_value)
        values = {fn(k, w) for w in (2, 3, max(k, 2) + 1, 1 << 20)}
    else:
        return None
    if len(values) != 1 or k > 2:  # beyond 2 the value depends on the size
        return None
    return values.pop() != negate


def _assigned_names(stmts: Sequence[cst.CSTNode]) -> set[str]:
    """Plain names bound by assignments in these statements and the blocks inside them (not
    in nested functions or classes)."""
    out: set[str] = set()

    def targets(t: cst.BaseExpression) -> None:
        if isinstance(t, cst.Name):
            out.add(t.value)
        elif isinstance(t, (cst.Tuple, cst.List)):
            for el in t.elements:
                if isinstance(el, cst.Element):
                    targets(el.value)

    for s in stmts:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        targets(t.target)
                elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                    targets(small.target)
        elif isinstance(s, (cst.FunctionDef, cst.ClassDef)):
            continue
        elif isinstance(s, cst.If):
            out |= _assigned_names(s.body.body)
            if s.orelse is not None:
                out |= _assigned_names(
                    [s.orelse] if isinstance(s.orelse, cst.If) else s.orelse.body.body
                )
        elif isinstance(s, cst.BaseCompoundStatement):
            body = getattr(s, "body", None)
            if isinstance(body, cst.IndentedBlock):
                out |= _assigned_names(body.body)
    return out


def _iterates_a_set(it: cst.BaseExpression) -> bool:
    """`set(x)`, `frozenset(x)`, `{a, b}`, `{k for k in x}` — a set whose elements are not
    evidently integers (whose order, unlike that of strings, is the same in every process)."""
    if isinstance(it, cst.Set):
        return not all(
            isinstance(e.value, cst.Integer) for e in it.elements if isinstance(e, cst.Element)
        )
    if isinstance(it, cst.SetComp):
        return True
    if (
        isinstance(it, cst.Call)
        and isinstance(it.func, cst.Name)
        and it.func.value in ("set", "frozenset")
    ):
        if not it.args:
            return False
        arg = it.args[0].value
        return not (
            isinstance(arg, cst.Call)
            and isinstance(arg.func, cst.Name)
            and arg.func.value == "range"
        )
    return False


def _target_names(f: cst.CompFor) -> list[str]:
    """The names a comprehension's `for` clauses bind."""
    out: list[str] = []
    while f is not None:
        stack = [f.target]
        while stack:
            t = stack.pop()
            if isinstance(t, cst.Name):
                out.append(t.value)
            elif isinstance(t, cst.Tuple | cst.List):
                stack.extend(e.value for e in t.elements)
            elif isinstance(t, cst.StarredElement):
                stack.append(t.value)
        f = f.inner_for_in
    return out


def _int_class_attributes(node: cst.ClassDef) -> dict[str, int]:
    """`NAME = <integer literal>` statements of a class body (`MAIN_PROCESS_RANK = -1`)."""
    out: dict[str, int] = {}
    if not isinstance(node.body, cst.IndentedBlock):
        return out
    for st in node.body.body:
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target, value = small.targets[0].target, _int(small.value)
                if isinstance(target, cst.Name) and value is not None:
                    out[target.value] = value
    return out
