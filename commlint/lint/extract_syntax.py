"""Questions about `ast` syntax that the extractor (`extract.Extractor`) asks without its
environment: a call's argument by keyword or position, the names a block assigns, whether a
test is decided by the world size, whether a loop iterates a set, a class's integer constants.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Sequence

from commlint.lint.extract_values import WORLD_SIZE_TEXT, _int
from commlint.lint.source_map import call_args


def _is_single_stage_test(left: ast.expr, right: ast.expr) -> bool:
    names = set()
    for side in (left, right):
        if not isinstance(side, ast.Call):
            return False
        f = side.func
        names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names == {"is_pipeline_first_stage", "is_pipeline_last_stage"}


def _is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _name_of(node: ast.AST | None) -> str | None:
    """The name a plain name is written as; `True`, `False` and `None` too (LibCST's trees,
    which the extractor read first, made them names: they stay usable as such)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant):
        v = node.value
        if v is None:
            return "None"
        if v is True:
            return "True"
        if v is False:
            return "False"
    return None


def _is_const(node: ast.AST | None, value: bool) -> bool:
    """`True` / `False` written out."""
    return isinstance(node, ast.Constant) and node.value is value


def _is_sentinel(op: ast.cmpop, comparator: ast.expr) -> bool:
    if not isinstance(op, ast.Eq | ast.NotEq | ast.Is | ast.IsNot):
        return False
    return _is_none(comparator) or _int(comparator) == -1


def _spec(raw):
    if raw is None:
        return None
    if isinstance(raw, tuple):
        return raw
    pos, kw = raw
    return (pos, kw)


def _kwarg(node: ast.Call, kw: str | None, pos: int | None) -> ast.expr | None:
    if kw is not None:
        for k in node.keywords:
            if k.arg == kw:
                return k.value
    if pos is not None:
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if pos < len(positional):
            return positional[pos]
    return None


_FLIPS: dict[type, type] = {
    ast.Lt: ast.Gt,
    ast.Gt: ast.Lt,
    ast.LtE: ast.GtE,
    ast.GtE: ast.LtE,
}


def _flip(op: ast.cmpop) -> ast.cmpop:
    flipped = _FLIPS.get(type(op))
    return flipped() if flipped is not None else op


def _env_key(text: str) -> str | None:
    m = re.fullmatch(r"os\.environ\[\s*['\"]([A-Z_]+)['\"]\s*\]", text)
    return m.group(1) if m else None


def _name_counts(node: ast.AST) -> Counter[str]:
    """How often each identifier is written in `node` (names, attributes, keywords,
    parameters, definitions, imports, `global`s, `as` targets)."""
    counts: Counter[str] = Counter()
    for n in ast.walk(node):
        t = type(n)
        if t is ast.Name:
            counts[n.id] += 1  # type: ignore[attr-defined]
        elif t is ast.Attribute:
            counts[n.attr] += 1  # type: ignore[attr-defined]
        elif t is ast.keyword:
            if n.arg is not None:  # type: ignore[attr-defined]
                counts[n.arg] += 1  # type: ignore[attr-defined]
        elif t is ast.arg:
            counts[n.arg] += 1  # type: ignore[attr-defined]
        elif t in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            counts[n.name] += 1  # type: ignore[attr-defined]
        elif t is ast.alias:
            for part in n.name.split("."):  # type: ignore[attr-defined]
                counts[part] += 1
            if n.asname:  # type: ignore[attr-defined]
                counts[n.asname] += 1  # type: ignore[attr-defined]
        elif t is ast.ImportFrom:
            for part in (n.module or "").split("."):  # type: ignore[attr-defined]
                if part:
                    counts[part] += 1
        elif t is ast.Global or t is ast.Nonlocal:
            for name in n.names:  # type: ignore[attr-defined]
                counts[name] += 1
        elif t is ast.ExceptHandler or t is ast.MatchAs or t is ast.MatchStar:
            if n.name:  # type: ignore[attr-defined]
                counts[n.name] += 1  # type: ignore[attr-defined]
        elif t is ast.MatchMapping:
            if n.rest:  # type: ignore[attr-defined]
                counts[n.rest] += 1  # type: ignore[attr-defined]
        elif t is ast.MatchClass:
            for name in n.kwd_attrs:  # type: ignore[attr-defined]
                counts[name] += 1
    return counts


def _swallows_oom(exc: str, handler: str) -> bool:
    """An `except` for running out of memory: `OutOfMemoryError` / `MemoryError`, or a
    `RuntimeError` whose handler tests for "out of memory" (torch before 1.13)."""
    return "MemoryError" in exc or ("RuntimeError" in exc and "out of memory" in handler.lower())


def _lone_call(stmts: Sequence[ast.stmt]) -> bool:
    """One simple statement that is a call, or assigns a call's result, and nothing else."""
    if len(stmts) != 1:
        return False
    small = stmts[0]
    if not isinstance(small, (ast.Expr, ast.Assign, ast.AnnAssign)):
        return False
    value = small.value
    if not isinstance(value, ast.Call):
        return False
    # arguments that are names, attributes or literals cannot fail on their own
    return all(_simple_arg(a.value) for a in call_args(value))


def _simple_arg(node: ast.expr) -> bool:
    if isinstance(node, ast.Name | ast.Attribute):
        return True
    if isinstance(node, ast.Constant):
        v = node.value
        return isinstance(v, int | float | str | bytes) or v is True or v is False or v is None
    return False


_COMPARE = {
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}


def _decided_by_world_size(test: ast.expr, text) -> bool | None:
    """`world_size > 1` (`args.world_size`, `dist.get_world_size()`) compared with a literal:
    its value whenever communication can go wrong, i.e. on every world size of 2 or more (a
    single rank has nobody to mismatch with); None when that value depends on the size."""
    negate = False
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negate = test.operand, not negate
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    left, right = test.left, test.comparators[0]
    fn = _COMPARE.get(type(test.ops[0]))
    if fn is None:
        return None
    if _is_int_literal(right) and WORLD_SIZE_TEXT.search(text(left)):
        k = right.value  # type: ignore[attr-defined]
        values = {fn(w, k) for w in (2, 3, max(k, 2) + 1, 1 << 20)}
    elif _is_int_literal(left) and WORLD_SIZE_TEXT.search(text(right)):
        k = left.value  # type: ignore[attr-defined]
        values = {fn(k, w) for w in (2, 3, max(k, 2) + 1, 1 << 20)}
    else:
        return None
    if len(values) != 1 or k > 2:  # beyond 2 the value depends on the size
        return None
    return values.pop() != negate


def _is_int_literal(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    )


def _assigned_names(stmts: Sequence[ast.stmt], attrs: bool = False) -> set[str]:
    """Plain names bound by assignments in these statements and the blocks inside
    them (not in nested functions or classes); with `attrs`, `self.NAME` targets too."""
    out: set[str] = set()

    def targets(t: ast.expr) -> None:
        if isinstance(t, ast.Name):
            out.add(t.id)
        elif (
            attrs
            and isinstance(t, ast.Attribute)
            and isinstance(t.value, ast.Name)
            and t.value.id == "self"
        ):
            out.add(f"self.{t.attr}")
        elif isinstance(t, (ast.Tuple, ast.List)):
            for el in t.elts:
                if not isinstance(el, ast.Starred):
                    targets(el)

    for s in stmts:
        if isinstance(s, ast.Assign):
            for t in s.targets:
                targets(t)
        elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
            targets(s.target)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        elif isinstance(s, ast.If):
            out |= _assigned_names(s.body, attrs) | _assigned_names(s.orelse, attrs)
        elif isinstance(s, _BLOCK_STATEMENTS):
            out |= _assigned_names(s.body, attrs)
    return out


_BLOCK_STATEMENTS = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.TryStar,
)


def _iterates_a_set(it: ast.expr) -> bool:
    """`set(x)`, `frozenset(x)`, `{a, b}`, `{k for k in x}` — a set whose elements are not
    evidently integers (whose order, unlike that of strings, is the same in every process)."""
    if isinstance(it, ast.Set):
        return not all(_is_int_literal(e) for e in it.elts if not isinstance(e, ast.Starred))
    if isinstance(it, ast.SetComp):
        return True
    if (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Name)
        and it.func.id in ("set", "frozenset")
    ):
        args = call_args(it)
        if not args:
            return False
        arg = args[0].value
        return not (
            isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "range"
        )
    return False


def _target_names(generators: list[ast.comprehension]) -> list[str]:
    """The names a comprehension's `for` clauses bind."""
    out: list[str] = []
    for f in generators:
        stack = [f.target]
        while stack:
            t = stack.pop()
            if isinstance(t, ast.Name):
                out.append(t.id)
            elif isinstance(t, ast.Tuple | ast.List):
                stack.extend(t.elts)
            elif isinstance(t, ast.Starred):
                stack.append(t.value)
    return out


def _int_class_attributes(node: ast.ClassDef) -> dict[str, int]:
    """`NAME = <integer literal>` statements of a class body (`MAIN_PROCESS_RANK = -1`)."""
    out: dict[str, int] = {}
    for st in node.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            target, value = st.targets[0], _int(st.value)
            if isinstance(target, ast.Name) and value is not None:
                out[target.id] = value
    return out
