"""Per-rank evaluation: run each rank's communication with the rank and world size concrete.

The taint rules (`branches.py`) reason about *all* ranks at once and must stay silent when a
condition's value is not known. Most programs, though, decide their communication from the
rank, the world size and constants: `if rank < world - 1: dist.send(x, rank + 1)`. This module
interprets a file's entry points (its `if __name__ == "__main__":` block, else the functions
that communicate and that nothing in the file calls) once per rank for a few world sizes, with
the stdlib `ast` (never importing or running user code), and records what each rank would do
on the network as a `Trace` (`source: static`, sites = source lines). The same graph checker
that judges dry-runs and plans judges it.

Soundness first: a rank whose path depends on a value the interpreter cannot know (data, an
opaque call that communicates, a loop without a decidable bound, an unknown group or peer)
abandons the whole world size — the taint rules decide there. Only a trace in which every rank
ran to its end or to a `raise` is checked.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePath

from commlint.lint import perrank_values as values
from commlint.lint.ast_walk import all_nodes
from commlint.lint.ir import CallSite, Comm, FileFacts, communicates, iter_nodes
from commlint.lint.parsed_trees import parsed
from commlint.lint.perrank_calls import Calls
from commlint.lint.perrank_exprs import Expressions
from commlint.lint.perrank_mesh import Meshes
from commlint.lint.perrank_model import (
    DEFAULT_WORLD_SIZES,
    MAX_ENTRIES,
    MAX_WORK,
    MAX_WORLD,
    MESH,
    NPROC,
    NPROCS,
    OTHER_WORLD,
    UNK,
    Abort,
    Builtin,
    Cls,
    Derived,
    Fn,
    Group,
    Mod,
    Obj,
    ProjMod,
    SharedWrite,
    Stop,
    Tensor,
    TensorMethod,
    _bind,
    _Break,
    _class_attr,
    _Continue,
    _is_known,
    _Return,
)
from commlint.lint.perrank_modules import Modules
from commlint.lint.perrank_stmts import Statements
from commlint.lint.perrank_templates import Templates, enter, register_rank_class
from commlint.lint.perrank_torch import TorchApi
from commlint.lint.perrank_units import CommSites
from commlint.lint.table import ApiTable

# What other modules read from here: the value types live in `perrank_model` and are
# re-exported (`perrank_values` looks them up lazily, `perrank_check` imports the rest).
__all__ = [
    "DEFAULT_WORLD_SIZES",
    "UNK",
    "Builtin",
    "Cls",
    "Derived",
    "FileEval",
    "Fn",
    "Mod",
    "Obj",
    "Rank",
    "Tensor",
    "TensorMethod",
    "WorldRun",
    "_class_attr",
    "_is_known",
    "evaluate_file",
    "iter_sites",
]


UNIFORM_NOTE = " (a uniform value: the same on every rank)"
MAX_PATHS = 32  # paths of one world size's exploration of uniform tests


# ---------------------------------------------------------------------------- the interpreter
class Rank(Statements, Expressions, Calls, TorchApi, Modules, Meshes):
    """One rank's run of one entry point at one world size."""

    def __init__(self, ev: FileEval, rank: int, world: int) -> None:
        self.ev = ev
        self.rank = rank
        self.world = world
        self.actions: list[dict] = []
        self.steps = 0
        self.depth = 0
        self.stack: list[tuple[str, str, int]] = []  # (function, caller's file, call line)
        self.groups: list[Group] = []
        self.flat_dims: dict = {}  # (root shape, root names) -> {flattened name: its view}
        # tests the taint rules call uniform, taken as true: (file, line) -> (file, origin)
        self.assumed: dict[tuple[int, int], tuple[object, int]] = {}
        # (line, origin) of each all_to_all_single whose output splits are not known
        self.split_origins: list[tuple[int, int | None]] = []
        self.handle_count = 0
        self.batch_count = 0
        self.decided: dict[int, set[bool]] = {}  # condition line -> values it took
        self.trips: dict[int, list[int]] = {}  # `for` line -> iterations, each time it ran
        self.end: tuple[str, int, str] | None = None
        self.env: dict = {}  # the environment of the call being evaluated
        self.fn_nodes: list[ast.AST] = []  # the functions being evaluated, innermost last
        self.cur = ev  # the file whose code runs now (the evaluated one, or a followed one)
        self.g: dict = ev.globals  # that file's module globals
        self.modules: dict[str, ProjMod | None] = {}  # followed modules, as this rank ran them
        self.line = 0  # the statement being evaluated
        self.rng: object = None  # the seed of the default random generators
        self.forks: list[tuple[tuple, int]] = []  # (explored test, its value's fingerprint)
        self.fork_seen: dict[tuple, int] = {}  # explored test site -> times reached
        self.yields: list | None = None  # what the generator being collected yielded so far
        self.collect_next: list | None = None  # the list the next call_fn's yields go to
        # shared module namespaces (`perrank_templates`) this rank rebound a global of: its copy
        self.overlays: dict[int, dict] = {}
        self.tworld: object | None = None  # the template world its shared modules come from

    def globals_of(self, g: dict) -> dict:
        """A module's namespace as this rank sees it: its own copy once it rebound a global."""
        return self.overlays.get(id(g), g) if self.overlays else g

    def own_globals(self, g: dict) -> dict:
        """This rank's copy of a shared module namespace, which it is about to write."""
        mine = self.overlays.get(id(g))
        if mine is None:
            mine = self.overlays[id(g)] = dict(g)
        if self.g is g:
            self.g = mine
        return mine


# ---------------------------------------------------------------------------- one file
register_rank_class(Rank)


@dataclass
class WorldRun:
    """One entry point evaluated at one world size."""

    entry: str
    world: int
    complete: bool
    reason: str = ""
    line: int = 0
    trace: object | None = None  # commlint.trace.Trace
    decided: dict[int, set[bool]] = field(default_factory=dict)
    trips: dict[int, set[tuple[int, ...]]] = field(default_factory=dict)  # `for` line -> ranks'
    creation_mismatch: tuple[int, dict[int, tuple[int, ...]]] | None = None
    # (line, ranks that call it, ranks that never do) of a new_group only some ranks call
    creation_missing: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
    executed: set[int] = field(default_factory=set)
    issues: int = 0  # checker findings on its trace (set by the judge)
    exact: bool = True  # no loop of unknown length was approximated
    refute_only: bool = False  # called only from other files: it may refute, never report
    explored: bool = False  # one path of an exploration (`FileEval.explore`): it refutes only
    steering: values.Steering | None = None  # ranks stopped at a rank-local decision
    local_splits: int | None = None  # an all_to_all whose output splits each rank guessed


class FileEval(CommSites):
    """Evaluates one file's entry points for every rank of every world size."""

    def __init__(
        self,
        facts: FileFacts,
        source: str,
        table: ApiTable,
        sizes: tuple[int, ...],
        communicating=None,
        called_elsewhere=None,
        modules_index=None,
        share: bool = True,
    ):
        self.modules_index = modules_index  # the run's other files, to follow imports into
        # the followed modules' top levels, run once for every rank (`perrank_templates`)
        self.templates = templates_of(modules_index, table) if share else None
        # whether the rest of the project calls a function of this name
        self.called_elsewhere = called_elsewhere or (lambda name: False)
        self.facts = facts
        self.path = facts.path
        self.short = PurePath(facts.path).name
        self.source = source
        self.table = table
        self.tree = parsed(self.path, source)  # the extraction's tree when it kept it
        self.work = 0
        self.index_sites(facts, communicating)
        self.declared = _declared_sizes(source)
        self.nodes = all_nodes(self.tree)  # one walk, shared by what follows
        fixed = _literal_peers(self.of_type(ast.Call))
        if not self.declared and fixed:
            # code written for a fixed topology (`dist.send(x, dst=1)`): the smallest world in
            # which its literal peers exist is the one it is written for
            sizes = (max(2, max(fixed) + 1),)
        self.sizes = tuple(sorted(set(self.declared or sizes)))
        functions = self.of_type(ast.FunctionDef, ast.AsyncFunctionDef)
        self.defined = {n.name for n in functions}  # type: ignore[attr-defined]
        self.function_spans = [(n.lineno, n.end_lineno or n.lineno) for n in functions]
        self.set_loops: dict[int, ast.AST] = {}
        self.globals: dict = {}
        self.recorded_lines: set[int] = set()
        self.rank_read = False  # the entry asked for the rank (else callers decide who calls it)
        self.symbolic = False  # a method entry: its own unknown group stands for the world
        self.symbolic_name: str | None = None
        self.approx = False  # a loop of unknown length was taken once: proves no absence
        self.fps = values.Fingerprints()  # the origins of the values every rank computed
        self._creations: dict[int, list[tuple[int, int, tuple[int, ...]]]] = {}
        self.creation_via: dict[int, str] = {}  # line here -> the new_group in another file
        self.plan: dict[tuple, bool] | None = None  # the explored tests' arms (None: no exploring)
        self.need: tuple | None = None  # the explored test a path stopped at, undecided
        self._ranks: dict[int, Rank] = {}  # the ranks of the last path run
        self.tworld: object | None = None  # the template world of its ranks (`perrank_templates`)

    def note_set_loop(self, node: ast.AST) -> None:
        self.set_loops[node.lineno] = node

    def note_creation(
        self, rank: Rank, k: int, members: tuple[int, ...], line: int, via: str = ""
    ) -> None:
        self._creations.setdefault(k, []).append((rank.rank, line, members))
        if via:
            self.creation_via[line] = via

    def entries(self) -> list[tuple[str, list[ast.stmt] | ast.FunctionDef, bool]]:
        """(name, entry, refute only) of each entry point of the file."""
        main = [
            s
            for s in self.tree.body
            if isinstance(s, ast.If)
            and isinstance(s.test, ast.Compare)
            and isinstance(s.test.left, ast.Name)
            and s.test.left.id == "__name__"
        ]
        if main:
            return [("__main__", main, False)]
        # a script without a `__main__` guard: its top-level statements are the program
        script = [
            s
            for s in self.tree.body
            if not isinstance(
                s,
                ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Import | ast.ImportFrom,
            )
        ]
        top: list = (
            [("<module>", script, False)] if any(self.communicates(s) for s in script) else []
        )
        called: set[str] = set()
        for n in self.of_type(ast.Call):
            f = n.func  # type: ignore[attr-defined]
            called.add(f.id if isinstance(f, ast.Name) else getattr(f, "attr", ""))
        out: list = []
        # called only from other files: their callers' evaluation stops at the call (it does
        # not cross files), so they are evaluated here too — to refute taint findings inside
        # them (`ZeroRedundancyOptimizer.consolidate_state_dict`, which Lightning calls), never
        # to report: their callers pair what they leave unpaired (`send_forward`)
        elsewhere = {k for k in self.defined if self.called_elsewhere(k)} - called
        called |= elsewhere
        refute: list = []
        for s in self.tree.body:
            if isinstance(s, ast.FunctionDef) and self._fn_communicates(s):
                if s.name not in called:
                    out.append((s.name, s, False))
                elif s.name in elsewhere:
                    refute.append((s.name, s, True))
            elif isinstance(s, ast.ClassDef):
                # a method nobody in the project calls by name: every rank of its groups runs it
                for m in s.body:
                    if (
                        isinstance(m, ast.FunctionDef)
                        and (m.name not in called or m.name in elsewhere)
                        and not m.name.startswith("__")
                        and m.args.args
                        and m.args.args[0].arg == "self"
                        and self._fn_communicates(m, f"{s.name}.")
                    ):
                        only = m.name in called
                        (refute if only else out).append((f"{s.name}.{m.name}", m, only))
        return top + out + refute

    def _fn_communicates(self, s: ast.FunctionDef, owner: str = "") -> bool:
        fn = self.facts.functions.get(f"{self.facts.module}.{owner}{s.name}")
        if fn is None:
            return self.communicates(s)
        return any(
            isinstance(n, Comm | CallSite) for n in iter_nodes(fn.body)
        ) and self.communicates(s)

    def run(self) -> list[WorldRun]:
        try:
            return self._run()
        finally:
            enter(None)  # outside an evaluation, nothing is shared

    def _run(self) -> list[WorldRun]:
        out: list[WorldRun] = []
        for name, entry, refute_only in self.entries()[:MAX_ENTRIES]:
            # a method's own group is seen from inside: one world size tells what the others do
            sizes = self.sizes[:1] if "." in name else self.sizes
            for w in sizes:
                runs = self.explore(name, entry, w)
                for run in runs:
                    run.refute_only = refute_only or run.explored
                out.extend(runs)
                if self.work > MAX_WORK:
                    return out
                run = runs[0]
                if (
                    not run.complete
                    and run.reason != "every rank stops"
                    and not run.reason.startswith(OTHER_WORLD)
                ):
                    break  # what stops one world size (data, an opaque call) stops the others
        return out

    def explore(self, name: str, entry, world: int) -> list[WorldRun]:
        """One world size; when every rank stops at a test of a value proved the same on every
        rank (a collective's result: `if flag.item(): continue` after all-reducing the flag),
        each arm of each such test is explored, all ranks taking it together: a path per
        combination, up to MAX_PATHS. The paths only refute (`explored`): the arm the data
        picks is not known, but when every path runs clean, no choice of it hangs. Any path
        that cannot be finished, or whose tests turn out not the same on every rank, leaves
        the world size unevaluated, as before."""
        first = self.run_world(name, entry, world)
        if first.complete or not first.reason.endswith(UNIFORM_NOTE):
            return [first]
        paths: list[WorldRun] = []
        pending: list[dict[tuple, bool]] = [{}]
        try:
            while pending:
                if len(paths) + len(pending) > MAX_PATHS or self.work > MAX_WORK:
                    return [first]
                self.plan, self.need = pending.pop(), None
                run = self.run_world(name, entry, world)
                if self.need is not None:
                    pending += [{**self.plan, self.need: b} for b in (False, True)]
                    continue
                if not run.complete or not self._paths_agree():
                    return [first]
                run.explored = True
                paths.append(run)
        finally:
            self.plan = self.need = None
        return paths

    def _paths_agree(self) -> bool:
        """Every rank of the last path reached the same explored tests, with values of one
        fingerprint: the tests were decided alike on every rank, as the path assumed."""
        seen = [rk.forks for rk in self._ranks.values()]
        return all(f == seen[0] for f in seen[1:])

    def run_world(self, name: str, entry, world: int) -> WorldRun:
        from commlint.trace import Action, RankEnd, Trace

        enter(self)
        ranks: dict[int, Rank] = {}
        self._creations = {}
        self.rank_read = False
        self.symbolic_name = None
        self.approx = False
        decided: dict[int, set[bool]] = {}
        executed: set[int] = set()
        stops: dict[int, tuple[Abort, int]] = {}  # ranks stopped at a value of known origin
        for r in range(world):
            self.globals = {"__name__": "__main__"}
            self.recorded_lines = set()
            rk = Rank(self, r, world)
            ranks[r] = rk
            self._ranks = ranks
            try:
                try:
                    if isinstance(entry, list):
                        body = [s for s in self.tree.body if s not in entry]
                        rk.run_block(body, self.globals)
                        for s in entry:
                            rk.stmt(s, self.globals)
                    else:
                        rk.run_block(
                            [s for s in self.tree.body if not _is_main_block(s)], self.globals
                        )
                        owner, _, _ = name.rpartition(".")
                        params = {}
                        if owner:
                            cls = self.globals.get(owner)
                            fn = _class_attr(cls, entry.name) if isinstance(cls, Cls) else None
                            if isinstance(fn, Fn):
                                fn = _bind(fn, Obj(cls))
                            self.symbolic = True
                        else:
                            fn = self.globals.get(entry.name)
                            self.symbolic = False
                        if not isinstance(fn, Fn):
                            return WorldRun(name, world, False, "entry not found")
                        for p in entry.args.args[1 if owner else 0 :]:
                            value = _param_value(p.arg, r, world)
                            if value is not UNK:
                                params[p.arg] = value  # the others keep their defaults
                        rk.call_fn(fn, [], params, entry)
                except (_Return, _Break, _Continue):
                    pass
            except Stop as stop:
                rk.end = (stop.kind, stop.line, stop.exc)
            except Abort as ab:
                fp = values.fp_of(rk, ab.steer) if ab.steer is not None else None
                if fp is None:
                    return WorldRun(name, world, False, ab.reason, ab.line)
                stops[r] = (ab, fp)  # the other ranks tell whether their values differ
                continue
            except RecursionError:
                return WorldRun(name, world, False, "too deeply nested")
            for line, vals in rk.decided.items():
                decided.setdefault(line, set()).update(vals)
            executed |= self.recorded_lines
        if stops:
            ab = next(iter(stops.values()))[0]
            run = WorldRun(name, world, False, ab.reason, ab.line)
            known = {r: rk.decided.get(ab.cond, set()) for r, rk in ranks.items() if r not in stops}
            run.steering = values.steering(self, world, stops) or values.partial_steering(
                self, world, stops, known
            )
            if len(stops) == world and len({fp for _ab, fp in stops.values()}) == 1:
                run.reason = f"{ab.reason}{UNIFORM_NOTE}"
            return run
        if not isinstance(entry, list) and not self.rank_read:
            # a helper that never asks for the rank: its callers decide which ranks run it
            return WorldRun(name, world, False, "does not depend on the rank")
        mismatch = missing = None
        for _k, seen in sorted(self._creations.items()):
            views = {r: m for r, _line, m in seen}
            if mismatch is None and len(set(views.values())) > 1:
                # without use_local_synchronization every rank must pass the same list
                mismatch = (seen[0][1], views)
            if missing is None and set(views) != set(ranks):
                # new_group waits for every rank of the default group: the ranks that never
                # call it this often leave the others waiting there
                missing = (seen[0][1], tuple(sorted(views)), tuple(sorted(set(ranks) - set(views))))
        all_ends = [rk.end for rk in ranks.values()]
        if all(end is not None for end in all_ends) and len({(e[1]) for e in all_ends}) == 1:
            # every rank stops at the same place: this world size is not one the program runs
            return WorldRun(name, world, False, "every rank stops", all_ends[0][1])
        groups: dict[str, list[int]] = {}
        for rk in ranks.values():
            for g in rk.groups:
                prev = groups.get(g.name)
                if prev is not None and tuple(prev) != g.members:
                    groups[g.name] = sorted(set(prev) | set(g.members))
                else:
                    groups[g.name] = list(g.members)
        if self.symbolic_name is not None:
            groups[self.symbolic_name] = list(range(world))
        trace = Trace(
            world_size=world,
            groups=groups,
            ranks={r: [Action(**a) for a in rk.actions] for r, rk in ranks.items()},
            ends={
                r: RankEnd(
                    kind=rk.end[0], message=rk.end[2] or None, site=f"{self.short}:{rk.end[1]}"
                )
                for r, rk in ranks.items()
                if rk.end is not None
            },
            source="static",
            meta={"program": self.path, "entry": name},
        )
        run = WorldRun(
            name,
            world,
            True,
            trace=trace,
            decided=decided,
            trips={
                line: {tuple(rk.trips.get(line, ())) for rk in ranks.values()}
                for line in {ln for rk in ranks.values() for ln in rk.trips}
            },
            creation_mismatch=mismatch,
            creation_missing=missing,
            executed=executed,
            exact=not self.approx,
        )
        run.steering = values.assumed_steering(self, world, [rk.assumed for rk in ranks.values()])
        run.local_splits = values.local_splits(
            self, world, [rk.split_origins for rk in ranks.values()]
        )
        return run


def _is_main_block(s: ast.stmt) -> bool:
    return (
        isinstance(s, ast.If)
        and isinstance(s.test, ast.Compare)
        and isinstance(s.test.left, ast.Name)
        and s.test.left.id == "__name__"
    )


def _param_value(name: str, rank: int, world: int) -> object:
    low = name.lower()
    if low in ("rank", "global_rank", "local_rank", "my_rank", "rank_id"):
        return rank
    if low in ("world_size", "world", "ws", "nranks", "num_ranks", "n_ranks", "nprocs"):
        return world
    return UNK


P2P_CALLS = frozenset({"send", "recv", "isend", "irecv", "P2POp"})
ROOTED = frozenset(
    {"broadcast", "reduce", "gather", "scatter", "broadcast_object_list", "gather_object"}
    | {"scatter_object_list"}
)
PEER_KEYWORDS = frozenset({"dst", "src", "peer", "dst_rank", "src_rank", "peer_rank"})


def _literal_peers(nodes: list[ast.AST]) -> set[int]:
    """Literal peer ranks of point-to-point calls (`dist.send(x, 1)`, `src=0`), and of the
    project's helpers that take a peer (`send_state_dict(sd, dst=1)`, `run_stage(peer=0)`)
    when they name two ranks or more (a fixed topology, not a root)."""
    out: set[int] = set()
    helpers: set[int] = set()
    for n in nodes:
        if not isinstance(n, ast.Call):
            continue
        name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        if name in ROOTED:
            continue
        p2p = name in P2P_CALLS
        pos = 2 if name == "P2POp" else 1
        cands = [n.args[pos]] if p2p and len(n.args) > pos else []
        cands += [k.value for k in n.keywords if k.arg in PEER_KEYWORDS]
        for c in cands:
            if isinstance(c, ast.Constant) and isinstance(c.value, int) and c.value < MAX_WORLD:
                (out if p2p else helpers).add(c.value)
    if len(helpers) > 1:
        out |= helpers
    return out


def _declared_sizes(source: str) -> tuple[int, ...]:
    sizes: set[int] = set()
    for rx in (NPROC, NPROCS):
        for m in rx.finditer(source):
            sizes.add(int(m.group(1)))
    for m in MESH.finditer(source):
        n = 1
        for g in m.groups():
            if g:
                n *= int(g)
        # a mesh may also cover part of a larger world (torch allows it): that world is
        # evaluated too, so a mesh created under `if rank < n:` is not proved fine at n alone
        sizes.update((n, 2 * n))
    return tuple(s for s in sorted(sizes) if 1 < s <= MAX_WORLD)


def evaluate_file(
    facts: FileFacts,
    table: ApiTable,
    sizes: tuple[int, ...] = DEFAULT_WORLD_SIZES,
    communicating=None,
    called_elsewhere=None,
    modules_index=None,
) -> tuple[FileEval, list[WorldRun]] | None:
    """Every entry point of one file at every world size; None when the file cannot be read
    or has nothing to evaluate."""
    if not communicates(facts):
        return None
    try:
        with open(facts.path, encoding="utf-8") as fh:
            source = fh.read()
        fe = FileEval(facts, source, table, sizes, communicating, called_elsewhere, modules_index)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None
    try:
        return fe, fe.run()
    except SharedWrite:
        # a rank wrote into a followed module's shared object: every rank runs them itself
        fe = FileEval(
            facts, source, table, sizes, communicating, called_elsewhere, modules_index, False
        )
        return fe, fe.run()


def templates_of(index, table: ApiTable) -> Templates | None:
    """The shared top levels of the run's followed modules, made on first use."""
    if index is None:
        return None
    if index.templates is None:
        index.templates = Templates(index, table)
    return index.templates


def iter_sites(finding) -> Iterator[tuple[str, int]]:
    """The `file:line` sites a checker finding names, in order."""
    for loc in finding.actions:
        if loc.site and ":" in loc.site:
            name, _, line = loc.site.rpartition(":")
            if line.isdigit():
                yield name, int(line)
