"""The extractor's own positions and qualified names answer what LibCST's `PositionProvider`
and `ScopeProvider` answer (they replaced them for speed), node for node, on torch's own
distributed sources and on constructs chosen to be awkward."""

from __future__ import annotations

import threading
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameSource, ScopeProvider

from commlint.lint import extract as extract_mod
from commlint.lint.engine import _table
from commlint.lint.extract import Extractor
from commlint.lint.positions import Positions

torch = pytest.importorskip("torch")
TORCH_DIST = Path(torch.__file__).parent / "distributed"
REAL = [
    TORCH_DIST / "distributed_c10d.py",
    TORCH_DIST / "fsdp" / "_runtime_utils.py",
    TORCH_DIST / "pipelining" / "schedules.py",
    TORCH_DIST / "optim" / "zero_redundancy_optimizer.py",
    TORCH_DIST / "elastic" / "agent" / "server" / "api.py",
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
    return {k: dist.broadcast(v, 0) for k, v in s.items()}
'''


def _check(source: str, path: str) -> int:
    """Runs the extractor on `source`; every qualified-name and import question it asks is
    asked of LibCST too, and every node's position is compared. Returns the questions asked."""
    asked = [0]
    errors: list[str] = []
    captured: dict[str, cst.Module] = {}
    parse = cst.parse_module

    def capture(src: str) -> cst.Module:
        captured["m"] = parse(src)
        return captured["m"]

    class Checking(Extractor):
        def _libcst(self):
            if not hasattr(self, "_lc"):
                self._lc = MetadataWrapper(captured["m"], unsafe_skip_copy=True).resolve(
                    ScopeProvider
                )
            return self._lc

        def qnames(self, node):
            ours = super().qnames(node)
            scope = self._libcst().get(node)
            theirs = sorted(
                q.name.lstrip(".") for q in (scope.get_qualified_names_for(node) if scope else ())
            )
            asked[0] += 1
            if ours != theirs:
                errors.append(f"{self._pos[node]} {self.text(node)}: {ours} != {theirs}")
            return ours

        def on_module(self, func):
            ours = super().on_module(func)
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                scope = self._libcst().get(func.value)
                found = scope.get_qualified_names_for(func.value) if scope else ()
                theirs = any(q.source == QualifiedNameSource.IMPORT for q in found)
                if ours != theirs:
                    errors.append(f"{self._pos[func]} {self.text(func)}: import {ours}")
            return ours

    def run() -> None:
        ext = Checking(path, "m", source, _table("{}"))
        ext.run()
        theirs = MetadataWrapper(captured["m"], unsafe_skip_copy=True).resolve(PositionProvider)
        ours = Positions(captured["m"])
        for node, r in theirs.items():
            if ours[node] != (r.start.line, r.start.column, r.end.line, r.end.column):
                errors.append(f"position of {type(node).__name__}: {ours[node]} != {r}")

    extract_mod.cst.parse_module = capture
    try:
        t = threading.Thread(target=run)  # torch's largest files nest deeply
        threading.stack_size(64 * 1024 * 1024)
        t.start()
        t.join()
    finally:
        extract_mod.cst.parse_module = parse
        threading.stack_size(0)
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
