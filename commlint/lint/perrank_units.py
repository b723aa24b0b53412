"""The project's other files, as the per-rank evaluator follows a call into them.

`perrank.py` interprets one file's entry points rank by rank. Real programs keep their
communication in helper modules (`from dist_utils import reduce_mean`) and their rank in
objects of classes defined elsewhere; stopping at the import loses the very call that hangs.
This module finds the file an import names among the files of the run (`ModuleIndex`) and
keeps what the evaluator needs of it (`Unit`: its tree and which of its lines communicate),
parsed once and shared by every rank and world size. Each rank executes a module's top level
itself (module state is per process), in `perrank.Rank`.

Soundness: a file is followed only when the run has its facts — the extractor's view of what
it communicates. A file the run never read stays opaque, as before. A file the prefilter
skipped (it never mentions distributed code) communicates only through the project modules it
imports, so any call in it counts as communicating when it imports one that does.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from collections.abc import Callable
from functools import cached_property
from pathlib import PurePath

from commlint.lint.ast_walk import all_nodes
from commlint.lint.ir import Branch, CallSite, Comm, FileFacts, Loop, ModuleCall, iter_nodes
from commlint.lint.parsed_trees import parsed

MAX_FOLLOWED_BYTES = 1_000_000  # a larger file is not followed (generated code)


class CommSites:
    """Which lines of a file communicate, as the extractor saw them: its calls that
    communicate, or call project code that does (`communicating(site)`). Shared by the
    evaluated file (`perrank.FileEval`) and the files it follows (`Unit`)."""

    calls_anything = False  # a skipped file that imports communicating code: any call counts
    nodes: list[ast.AST]  # every node of the file, in `ast.walk`'s order

    @cached_property
    def by_type(self) -> dict[type, list[ast.AST]]:
        out: dict[type, list[ast.AST]] = {}
        for n in self.nodes:
            out.setdefault(n.__class__, []).append(n)
        return out

    def of_type(self, *types: type) -> list[ast.AST]:
        """The file's nodes of these types (type by type, each in `ast.walk`'s order)."""
        if len(types) == 1:
            return self.by_type.get(types[0], [])
        return [n for t in types for n in self.by_type.get(t, [])]

    def index_sites(self, facts: FileFacts, communicating=None) -> None:
        self.comm_sites: set[tuple[int, int]] = set()
        self.comm_at: dict[tuple[int, int], Comm] = {}
        # where each communicating call ends: `model(x).pow(2)` starts where `model(x)` does
        self.comm_ends: dict[tuple[int, int], set[tuple[int, int]]] = {}
        # `loss.backward()` after the forward of a module wrapped here (DDP): the group key
        # of that wrapper, whose gradients the backward all-reduces
        self.backward_at: dict[tuple[int, int], str] = {}
        for fn in facts.functions.values():
            for n in iter_nodes(fn.body):
                if isinstance(n, Comm) or (
                    isinstance(n, CallSite | ModuleCall)
                    and communicating is not None
                    and communicating(n)
                ):
                    self.comm_sites.add((n.pos.line, n.pos.col))
                    ends = self.comm_ends.setdefault((n.pos.line, n.pos.col), set())
                    ends.add((n.pos.end_line, n.pos.end_col))
                if isinstance(n, Comm):
                    self.comm_at[(n.pos.line, n.pos.col)] = n
                elif isinstance(n, ModuleCall) and n.backward:
                    typ = dict(r for r in n.refs if r[0] == "typ").get("typ")
                    if isinstance(typ, str) and typ.startswith("wrapped:"):
                        self.backward_at[(n.pos.line, n.pos.col)] = typ.split(":", 2)[2]
        self.comm_lines = {line for line, _col in self.comm_sites}
        self.sorted_comm_lines = sorted(self.comm_lines)
        self.uniform_lines = uniform_conditions(facts)
        self._comm_cache: dict[int, bool] = {}

    def communicates(self, node: ast.AST) -> bool:
        """Whether `node`'s lines hold a call that communicates."""
        key = id(node)
        if key not in self._comm_cache:
            lo = getattr(node, "lineno", 0)
            hi = getattr(node, "end_lineno", lo) or lo
            hit = any_line_within(self.sorted_comm_lines, lo, hi)
            if not hit and self.calls_anything:
                hit = any(isinstance(n, ast.Call) for n in ast.walk(node))
            self._comm_cache[key] = hit
        return self._comm_cache[key]


class Unit(CommSites):
    """One followed file: its syntax tree and which of its lines communicate."""

    def __init__(self, facts: FileFacts, source: str, short: str, communicating=None) -> None:
        self.facts = facts
        self.path = facts.path
        self.module = facts.module
        self.short = short
        self.source = source
        self.tree = parsed(self.path, source)
        self.index_sites(facts, communicating)

    @cached_property
    def nodes(self) -> list[ast.AST]:
        """Every node of the file (walked only when asked: most followed files never are)."""
        return all_nodes(self.tree)


def any_line_within(sorted_lines: list[int], lo: int, hi: int) -> bool:
    """Whether one of `sorted_lines` lies in [lo, hi] (a binary search: files of thousands of
    functions ask it for every statement)."""
    k = bisect_left(sorted_lines, lo)
    return k < len(sorted_lines) and sorted_lines[k] <= hi


def uniform_conditions(facts: FileFacts) -> frozenset[int]:
    """Lines of the conditions around communication that the taint analysis found to depend
    on neither the rank nor data (a config flag, a model's parameter, a value every rank
    computes alike): every rank takes the same arm there, whatever its value."""
    uniform: set[int] = set()
    divergent: set[int] = set()
    for fn in facts.functions.values():
        for n in iter_nodes(fn.body):
            cond = n.cond if isinstance(n, Branch | Loop) else None
            if cond is None:
                continue
            line = cond.pos.line
            if cond.divergent or cond.deps or cond.guard or cond.decorator or cond.vs_attr:
                divergent.add(line)
            else:
                uniform.add(line)
    return frozenset(uniform - divergent)


class ModuleIndex:
    """The files of one run by module name, and the imports that name them."""

    def __init__(self, files: list[FileFacts], communicating=None) -> None:
        self.by_module: dict[str, list[FileFacts]] = {}
        for ff in files:
            if ff.syntax_error is None and not ff.internal_error and ff.not_analysed is None:
                self.by_module.setdefault(ff.module, []).append(ff)
        self.communicating = communicating
        self.templates = None  # perrank_templates.Templates, made by the first evaluation
        self._units: dict[str, Unit | None] = {}
        self._suffix: dict[str, list[str]] = {}
        # every rank of every evaluated file asks again for the same imports: answered once
        self._found: dict[tuple[str, str, str, int], str | None] = {}
        for mod in self.by_module:
            parts = mod.split(".")
            for k in range(1, len(parts)):
                self._suffix.setdefault(".".join(parts[k:]), []).append(mod)

    def find(self, importer: str, importer_module: str, name: str, level: int) -> str | None:
        """The module name of the run's file that `import name` (with `level` leading dots)
        means in the file `importer`, or None."""
        key = (importer, importer_module, name, level)
        if key in self._found:
            return self._found[key]
        got = self._find(importer, importer_module, name, level)
        self._found[key] = got
        return got

    def _find(self, importer: str, importer_module: str, name: str, level: int) -> str | None:
        if level:
            base = importer_module.split(".")
            is_package = PurePath(importer).stem == "__init__"
            drop = level - 1 if is_package else level
            if drop > len(base):
                return None
            base = base[: len(base) - drop]
            target = ".".join([*base, name] if name else base)
            return target if target in self.by_module else None
        if name in self.by_module and len(self.by_module[name]) == 1:
            return name
        # a project checked from a parent folder: `cases.x.dist_utils` for `dist_utils`,
        # preferring the module beside the importer
        cands = self._suffix.get(name, [])
        if not cands:
            return None
        here = importer_module.rpartition(".")[0]
        beside = ".".join(filter(None, [here, *name.split(".")[:-1]]))
        near = [c for c in cands if c.rpartition(".")[0] == beside]
        if len(near) == 1:
            return near[0]
        return cands[0] if len(cands) == 1 else None

    def unit(self, module: str, taken_shorts: Callable[[str], bool]) -> Unit | None:
        """The followed file of a module name (parsed once), or None when it cannot be read."""
        if module in self._units:
            return self._units[module]
        got: Unit | None = None
        files = self.by_module.get(module) or []
        if len(files) == 1:
            ff = files[0]
            try:
                with open(ff.path, "rb") as fh:
                    data = fh.read(MAX_FOLLOWED_BYTES + 1)
                if len(data) <= MAX_FOLLOWED_BYTES:
                    source = data.decode("utf-8-sig")
                    short = PurePath(ff.path).name
                    if taken_shorts(short):
                        short = ff.module.replace(".", "/") + ".py"
                    got = Unit(ff, source, short, self.communicating)
                    if ff.skipped:
                        got.calls_anything = self._imports_communicating(got)
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
                got = None
        self._units[module] = got
        return got

    def _imports_communicating(self, unit: Unit) -> bool:
        for n in ast.walk(unit.tree):
            names: list[tuple[str, int]] = []
            if isinstance(n, ast.Import):
                names = [(a.name, 0) for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                names = [(n.module or "", n.level)]
            for name, level in names:
                mod = self.find(unit.path, unit.module, name, level)
                if mod is not None and any(not f.skipped for f in self.by_module[mod]):
                    return True
        return False
