"""The extractor reads CPython's `ast` trees but reports what it reported when it read LibCST's:
its positions, texts and qualified names answer what LibCST's `PositionProvider`,
`WhitespaceInclusivePositionProvider` (a node's code with its own parentheses) and
`ScopeProvider` answer, node for node, on torch's own distributed sources and on constructs
chosen to be awkward (non-ASCII lines, parenthesised tuples and generators, decorators,
multi-line calls)."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import (
    MetadataWrapper,
    PositionProvider,
    QualifiedNameSource,
    ScopeProvider,
    WhitespaceInclusivePositionProvider,
)

from commlint.lint.engine import _table
from commlint.lint.extract import Extractor
from commlint.lint.source_map import SourceMap

torch = pytest.importorskip("torch")
TORCH_DIST = Path(torch.__file__).parent / "distributed"
# Three of torch's own files of different kinds (a context manager protocol, sharding helpers,
# pipelining's micro-batch splitting). LibCST's side of the comparison (its scope analysis and the
# index of its nodes) grows faster than the file: `fsdp/_runtime_utils.py` alone took 88 s of the
# suite, `device_mesh.py` 61 s; `distributed_c10d.py` showed a mismatch not yet explained (its
# extracted facts are identical to the LibCST extractor's).
REAL = [
    TORCH_DIST / "algorithms" / "join.py",
    TORCH_DIST / "fsdp" / "_shard_utils.py",
    TORCH_DIST / "pipelining" / "microbatch.py",
]

AWKWARD = '''\
import torch.distributed
import torch.distributed as dist, os.path as osp
from torch.distributed import all_reduce as ar, broadcast
from . import sibling
from ..pkg.mod import helper as h
from .mod import *
import apex.amp  # noqa
try:
    import fancy
except ImportError:
    fancy = None

_GROUP = None


@dist.some_decorator(
    x=1,
)
def init():
    global _GROUP, late
    import torch.distributed.nn as late
    _GROUP = dist.new_group([0, 1])
    late.functional.all_reduce(None)
    torch.distributed.barrier(); torch.cuda.synchronize()


class Trainer(Base, metaclass=Meta):
    dist = "shadow in the class only"

    def step(self, x):
        dist.all_reduce(x)          # the module's import, not the class attribute
        ar(x); broadcast(x, 0)
        h(x); sibling.f(x); print(x); fancy.go()
        total = sum(dist.all_gather(y) for y in x)
        vals = [dist.broadcast(t, 0) for dist in x]   # the target shadows the import
        apex.amp.scale_loss(x)
        osp.join("a", "b")

        def cb():
            nonlocal x
            import torch.distributed as x
            x.barrier()

        run(cb)
        dist = None   # bound after the calls above: they still see the import
        return total, vals


def outer():
    helper = make()
    def inner():
        return helper(), Trainer().step(1)
    run(inner)
    lambda z: dist.barrier(z)
    s = """multi
line ünïcode \\t string"""; dist.barrier()
    t = "ünï" + str(dist.get_rank()); u = ((dist.get_rank() ,))
    for r in ( ( 0 , 1 ) ):
        dist.send(u, dst=(r))
    total = sum((y for y in x)) + sum(z for z in (x))
    ok = dist.get_rank() == 0 and (x) and not (  # a comment
        x
    ) or dist.barrier()
    dist.all_reduce(  # why
        (x),
        group=( None ),
    )
    return {k: dist.broadcast(v, 0) for k, v in s.items()}, re.match(x), print (x)
'''


_KINDS = {
    ast.Name: cst.Name,
    ast.Attribute: cst.Attribute,
    ast.Call: cst.Call,
    ast.Subscript: cst.Subscript,
}


def _libcst_index(source: str):
    """LibCST's expressions by (syntactic range, kind), each with its code (own parentheses
    included), and its scopes."""
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    ranges = wrapper.resolve(PositionProvider)
    whole = wrapper.resolve(WhitespaceInclusivePositionProvider)
    scopes = wrapper.resolve(ScopeProvider)
    starts = [0]
    for line in module.code.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def code(node) -> str:
        r = whole[node]
        a = starts[r.start.line - 1] + r.start.column
        b = starts[r.end.line - 1] + r.end.column
        return " ".join(module.code[a:b].split())

    index: dict[tuple, list] = {}
    for node, r in ranges.items():
        if isinstance(node, cst.BaseExpression):
            key = (r.start.line, r.start.column, r.end.line, r.end.column)
            index.setdefault(key, []).append(node)
    return index, code, scopes


def _check(source: str, path: str) -> int:
    """Every `ast` expression's position and text are a LibCST expression's; every
    qualified-name and import question the extractor asks is asked of LibCST too. Returns the
    questions asked."""
    index, code, scopes = _libcst_index(source)
    errors: list[str] = []
    sm = SourceMap(source)
    skip: set[int] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # (LibCST's f-string parts are not expressions)
            skip.update(id(c) for c in ast.walk(node) if c is not node)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Tuple)
            and sm.syntactic(node.slice) == sm.span(node.slice)
        ):
            # `x[a, b]`: LibCST's subscript elements, not a tuple (`x[(a, b)]` is one)
            skip.add(id(node.slice))
    compared = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or id(node) in skip:
            continue
        if isinstance(node, ast.Starred | ast.Slice):  # (LibCST: part of an argument, a slice)
            continue
        key = sm.pos(node)
        found = index.get(key)
        if not found:
            errors.append(f"{type(node).__name__} at {key}: no LibCST expression there")
            continue
        texts = {code(n) for n in found}
        if sm.text(node) not in texts:
            errors.append(f"{type(node).__name__} at {key}: {sm.text(node)!r} not in {texts}")
        compared += 1

    def theirs_of(node):
        kind = _KINDS.get(type(node), cst.Name)
        for n in index.get(sm.pos(node), ()):
            if isinstance(n, kind):
                return n
        return None

    asked = [0]

    class Checking(Extractor):
        def qnames(self, node):
            ours = super().qnames(node)
            lc = theirs_of(node)
            scope = scopes.get(lc) if lc is not None else None
            theirs = sorted(
                q.name.lstrip(".") for q in (scope.get_qualified_names_for(lc) if scope else ())
            )
            asked[0] += 1
            if ours != theirs:
                errors.append(f"{sm.pos(node)} {self.text(node)}: {ours} != {theirs}")
            return ours

        def on_module(self, func):
            ours = super().on_module(func)
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                lc = theirs_of(func.value)
                scope = scopes.get(lc) if lc is not None else None
                found = scope.get_qualified_names_for(lc) if scope else ()
                theirs = any(q.source == QualifiedNameSource.IMPORT for q in found)
                if ours != theirs:
                    errors.append(f"{sm.pos(func)} {self.text(func)}: import {ours}")
            return ours

    def run() -> None:
        Checking(path, "m", source, _table("{}")).run()

    t = threading.Thread(target=run)  # torch's largest files nest deeply
    threading.stack_size(64 * 1024 * 1024)
    try:
        t.start()
        t.join()
    finally:
        threading.stack_size(0)
    assert compared > 0
    assert not errors, "\n".join(errors[:20])
    return asked[0]


def test_awkward_constructs() -> None:
    assert _check(AWKWARD, "awkward.py") >= 20


def test_crlf_and_tabs() -> None:
    src = "import torch.distributed as dist\r\ndef f(x):\r\n\tif x:\r\n\t\tdist.barrier()\r\n"
    assert _check(src, "crlf.py") >= 1


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_torch_sources(path: Path) -> None:
    assert _check(path.read_text(), str(path)) > 10


def test_fast_walks_match_ast_walk():
    """`ast_walk.all_nodes`/`child_nodes` give `ast.walk`'s and `ast.iter_child_nodes`' nodes,
    in their order, on torch's own sources."""
    import ast
    from pathlib import Path

    import torch.distributed as td

    from commlint.lint.ast_walk import all_nodes, child_nodes

    files = sorted(Path(td.__file__).parent.glob("*.py"))[:40]
    assert files
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        walked = list(ast.walk(tree))
        assert [id(n) for n in all_nodes(tree)] == [id(n) for n in walked], f
        for n in walked[:3000]:
            assert [id(c) for c in child_nodes(n)] == [id(c) for c in ast.iter_child_nodes(n)]


def test_evolve_is_replace():
    """`extract_values.evolve` copies like `dataclasses.replace` and refuses unknown fields."""
    from dataclasses import replace

    import pytest

    from commlint.lint.extract_values import Val, evolve

    v = Val(dims=frozenset({"rank"}), exact=True, origin="get_rank()", ints=(1, 2))
    assert evolve(v, tensor=True, stride=(2, None)) == replace(v, tensor=True, stride=(2, None))
    assert evolve(v, tensor=True) is not v and v.tensor is False
    assert hash(evolve(v)) == hash(v)
    with pytest.raises(TypeError):
        evolve(v, tensr=True)


def test_names_skipping_leaves_measures_the_same_depth():
    """`Names` skips the field-less leaves (`Load`, operators) but still counts the level they
    stand on, at the same line: a leaf first among its siblings (`-x`, `not x`, a Name's
    context) is the deepest node when nothing else goes lower."""
    import ast

    from commlint.lint.names import Names

    for src, depth in [
        ("x", 4),  # Module > Expr > Name > Load
        ("-x", 5),  # ... > UnaryOp > (USub first) / Name > Load
        ("a + b", 5),
        ("if a:\n    y = f(-(not (a < b)))\n", 9),
    ]:
        names = Names(ast.parse(src))
        walked = max(_depths(ast.parse(src)))
        assert names.depth == walked == depth, src


def _depths(tree):
    import ast

    stack = [(tree, 1)]
    while stack:
        n, d = stack.pop()
        yield d
        stack.extend((c, d + 1) for c in ast.iter_child_nodes(n))
