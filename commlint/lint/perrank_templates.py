"""The top levels of the project's followed modules, run once and shared by every rank.

Each rank of each world size of each evaluated file imports the project's modules itself
(`perrank_stmts.Statements.import_module`): module state is per process. Run naively, that
repeats the same work for every rank, world size, entry point and file — on megatron-core and
deepspeed, 99 % of the evaluator's statements were the top levels of followed modules, each
run some 100,000 times.

Here a module's top level runs once per template world, in a rank of its own (`TemplateRank`) that
knows no rank, no world size and no evaluated file, and the objects it made are shared: a
rank importing the module takes them as they are (`Templates.instantiate`), and is charged
exactly what the run it skips would have cost — its statements against the budgets, the
conditions it decided, the value origins it fingerprinted, the line it ended on — so that
everything after the import goes as before.

Why a rank may take the shared objects (each point is checked, else the module runs for real
in the rank, as before):

- *The run does not depend on the rank.* A top level that reads the rank, the world size, the
  random seed or the evaluated file, that communicates, creates a group or nests calls as deep
  as the depth limit is never shared; one that asked for an explored arm (`forced`) is not
  taken while arms are explored; one that found a module half-imported (a package cycle) is
  taken only inside that module's own import, where the rank finds it half-imported too.
- *Its inputs are the same.* The modules it imports and finds already imported are, in the
  rank, the same shared objects, unchanged: a rank that rebound a global of one of them (a
  `global` statement: copy on write, below) or holds its own run of one runs the module itself.
  Modules the shared run imported for the first time are charged to the rank only when the rank
  has not imported them yet (`_Plan` replays the run's imports in order).
- *Nobody changes a shared object.* A rank that would write into one — an attribute, an item,
  an in-place tensor operation, a list's `append` — raises `SharedWrite` at the write
  (`perrank_model.guard`) and its file is evaluated again without sharing
  (`perrank.evaluate_file`); a module's module-level names rebound by a `global` statement go to
  the rank's own copy of that module's namespace (`Rank.own_globals`, read through
  `Rank.globals_of`). Objects of a type not known here are never shared.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from commlint.lint.perrank_model import (
    MAX_DEPTH,
    MAX_STEPS,
    MAX_WORK,
    SHARED,
    Abort,
    Builtin,
    Cls,
    DType,
    EnvMethod,
    Fn,
    Group,
    GroupMethod,
    Interval,
    Mod,
    Obj,
    ProjMod,
    Property,
    RankFlag,
    SharedWrite,
    Stop,
    Tensor,
    TensorMethod,
    Unknown,
    _Break,
    _Continue,
    _Environ,
    _Return,
)
from commlint.lint.perrank_values import ArgParser, Fingerprints, ParserMethod

TEMPLATE_STEPS = MAX_WORK  # a top level longer than this is never shared: no rank may run it
MAX_FP_NODES = 200_000  # `Fingerprints.node`'s own cap, replayed alike

ATOMIC = (int, float, str, bytes, bool, type(None), range, Unknown, Mod, Group, DType, RankFlag)
ATOMIC += (Builtin, _Environ, EnvMethod, Interval)


class TemplateFail(BaseException):
    """The module's top level cannot be shared (see the module's docstring)."""


@dataclass
class Chunk:
    """What a stretch of a module's own statements (between two imports) did to its rank."""

    ticks: int = 0
    last_line: int | None = None
    decided: list[tuple[int, bool]] = field(default_factory=list)
    nodes: list[tuple[int, tuple]] = field(default_factory=list)  # Fingerprints.node calls
    data: list[int] = field(default_factory=list)  # Fingerprints.data additions
    approx: bool = False


@dataclass
class Record:
    """One module's shared top level: its module (None: opaque) and its run, in order."""

    name: str
    depth: int  # the template rank's call depth when the import began
    mod: ProjMod | None = None
    ops: list = field(default_factory=list)  # Chunk, or (module imported, its depth - ours)
    reach: int = 0  # deepest call entered, relative to `depth`
    forced: bool = False  # asked for an explored arm (`Statements.forced`)
    done: bool = False
    failed: bool = False
    closure: frozenset[str] = frozenset()  # every module its run imported, transitively
    # modules it found half-imported (a cycle): it is taken only inside their own import
    saw: set[str] = field(default_factory=set)

    def chunk(self) -> Chunk:
        if not self.ops or not isinstance(self.ops[-1], Chunk):
            self.ops.append(Chunk())
        return self.ops[-1]


class _LoggedSet(set):
    """A condition's values in the template rank's `decided`: each addition is logged."""

    def __init__(self, rank: TemplateRank, line: int) -> None:
        super().__init__()
        self.rank = rank
        self.line = line

    def add(self, b: object) -> None:
        self.rank.current().chunk().decided.append((self.line, bool(b)))
        super().add(b)


class _LoggedDecided(dict):
    def __init__(self, rank: TemplateRank) -> None:
        super().__init__()
        self.rank = rank

    def setdefault(self, line, default=None):  # type: ignore[override]
        return _LoggedSet(self.rank, line)


class _LoggedData(set):
    def __init__(self, rank: TemplateRank) -> None:
        super().__init__()
        self.rank = rank

    def add(self, fp: object) -> None:
        self.rank.current().chunk().data.append(fp)  # type: ignore[arg-type]
        super().add(fp)


class _LoggedFingerprints(Fingerprints):
    def __init__(self, rank: TemplateRank) -> None:
        super().__init__()
        self.rank = rank
        self.data = _LoggedData(rank)

    def node(self, line: int, label: object, children: tuple) -> int:
        h = super().node(line, label, children)
        self.rank.current().chunk().nodes.append((h, (line, label, children)))
        return h


class _TemplateEval:
    """What the template rank sees of "the evaluated file": nothing that depends on one."""

    path = None
    globals: dict = {}  # noqa: RUF012 - never written: the template rank runs only modules
    recorded_lines: set[int] = frozenset()  # type: ignore[assignment]
    rank_read = False
    need = None

    def __init__(self, index, table) -> None:
        self.modules_index = index
        self.table = table
        self.short = ""  # the file whose rank asked (`ModuleIndex.unit` names files by it)
        self.work = 0
        self.rank: TemplateRank | None = None
        self.fps: Fingerprints = Fingerprints()

    @property
    def approx(self) -> bool:
        return False

    @approx.setter
    def approx(self, value: bool) -> None:
        if value and self.rank is not None:
            self.rank.current().chunk().approx = True

    @property
    def plan(self) -> None:
        assert self.rank is not None
        for rec in self.rank.building:
            rec.forced = True  # a rank that explores arms would go on differently
        return None

    def _no(self, *args, **kwargs):
        raise TemplateFail

    note_creation = note_set_loop = communicates = _no
    defined = symbolic = symbolic_name = sizes = facts = property(_no)


_RANK_CLASS: list = []  # `perrank.Rank`, registered by `perrank` (which imports this module)


def register_rank_class(cls: type) -> None:
    """The evaluator's rank class, which a template rank extends (given, not imported: the
    evaluator's module imports this one)."""
    _RANK_CLASS[:] = [cls]
    _TEMPLATE_RANK.clear()


def _make_template_rank():
    Rank = _RANK_CLASS[0]

    class TemplateRank(Rank):
        """A rank of no rank: it runs followed modules' top levels, once, for all ranks."""

        def __init__(self, ev: _TemplateEval) -> None:
            self._ready = False
            super().__init__(ev, -1, -1)  # type: ignore[arg-type]
            self.decided = _LoggedDecided(self)
            self.building: list[Record] = []
            self._ready = True

        def current(self) -> Record:
            return self.building[-1]

        def tick(self, line: int) -> None:
            self.steps += 1
            self.line = line
            c = self.building[-1].chunk()
            c.ticks += 1
            c.last_line = line
            if self.steps > TEMPLATE_STEPS:
                raise TemplateFail

        def call_fn(self, fn, args, kwargs, e):
            if self.depth >= MAX_DEPTH:
                raise TemplateFail  # the limit depends on where the rank imports it
            for rec in self.building:
                rec.reach = max(rec.reach, self.depth - rec.depth)
            return super().call_fn(fn, args, kwargs, e)

        def own_globals(self, g: dict) -> dict:
            raise TemplateFail  # another shared module's global rebound at import time

        def import_module(self, name: str, level: int) -> ProjMod | None:
            index = self.ev.modules_index
            target = index.find(self.cur.path, self.cur.module, name, level)
            if target is None:
                return None
            return self.templates.run(target, self)

    for name in ("rank", "world", "rng"):
        setattr(TemplateRank, name, _context_property(name))
    return TemplateRank


def _context_property(name: str) -> property:
    slot = f"_{name}"

    def get(self):
        if self._ready:
            raise TemplateFail  # depends on the rank that imports it
        return getattr(self, slot)

    def put(self, value) -> None:
        if self._ready:
            raise TemplateFail
        setattr(self, slot, value)

    return property(get, put)


_TEMPLATE_RANK: list = []


def TemplateRank(ev: _TemplateEval):
    if not _TEMPLATE_RANK:
        _TEMPLATE_RANK.append(_make_template_rank())
    return _TEMPLATE_RANK[0](ev)


class Templates:
    """The shared top levels of one run's followed modules (per process: a forked worker
    builds its own), in worlds: a world imports modules as one process would, and the ranks of
    an evaluated file take theirs from one world only (`Rank.tworld`), the one of the files
    whose first import was the same (`world_for`)."""

    def __init__(self, index, table) -> None:
        self.index = index
        self.table = table
        self.builds = 0  # top levels run so far (for tests: once per module and world)
        self.by_first: dict[str, World] = {}  # a world by the first module imported in it

    def instantiate(self, rank, target: str) -> tuple[bool, ProjMod | None]:
        """`import target` in `rank` from a shared run, when its outcome is the same;
        (False, None) when the rank must run the module itself."""
        if rank.collect_next is not None:
            return False, None
        if rank.tworld is None:
            rank.tworld = self.world_for(rank.ev, target)
        return rank.tworld.instantiate(rank, target)

    def world_for(self, ev, target: str) -> World:
        """The world of an evaluated file's ranks: the one whose first import was the file's
        first (files that begin alike import alike; a package and its submodules import each
        other, so which one comes first decides what the others see half-imported)."""
        w = getattr(ev, "tworld", None)
        if w is None:
            w = self.by_first.get(target)
            if w is None:
                w = self.by_first[target] = World(self)
            ev.tworld = w
            SHARED.ids = w.ids
        return w


class World:
    """One template world: every module imported at most once, by its template rank."""

    def __init__(self, pool: Templates) -> None:
        self.pool = pool
        self.records: dict[str, Record] = {}
        self.ids: set[int] = set()  # every shared object (`perrank_model.SHARED`)
        self.ev = _TemplateEval(pool.index, pool.table)
        self.rank = TemplateRank(self.ev)
        self.rank.templates = self
        self.ev.rank = self.rank
        self.ev.fps = _LoggedFingerprints(self.rank)

    # ------------------------------------------------------------------ building
    def get(self, target: str, short: str) -> Record | None:
        rec = self.records.get(target)
        if rec is None:
            self.ev.short = short
            self.rank.steps = 0
            # what cannot be shared leaves records unfinished: never taken
            with contextlib.suppress(TemplateFail, SharedWrite, RecursionError):
                self.run(target, self.rank)
            rec = self.records.get(target)
        return rec if rec is not None and rec.done and not rec.failed else None

    def run(self, target: str, rank) -> ProjMod | None:
        """`import target` in the template rank: its top level, run once."""
        if rank.building:
            here = rank.building[-1]
            here.ops.append((target, rank.depth - here.depth))
        rec = self.records.get(target)
        if rec is not None:
            if rec.failed:
                raise TemplateFail  # a module that cannot be shared
            if not rec.done:
                # a cycle: what it finds is the part run so far, as in any rank
                for r in rank.building[rank.building.index(rec) + 1 :]:
                    r.saw.add(target)  # the ones begun inside its import
            return rec.mod
        index = self.ev.modules_index
        unit = index.unit(target, lambda short: short == self.ev.short)
        rec = Record(target, rank.depth)
        self.records[target] = rec
        if unit is not None:
            rec.mod = ProjMod(target, {"__name__": target})
            rank.building.append(rec)
            outer = rank.cur, rank.g
            rank.cur, rank.g = unit, rec.mod.globals
            try:
                rank.run_block(unit.tree.body, rec.mod.globals)
            except (Abort, Stop, _Return, _Break, _Continue):
                rec.mod = None  # its top level cannot be followed: opaque, in every rank
            except BaseException:
                rec.failed = True
                raise
            finally:
                rank.cur, rank.g = outer
                rank.building.pop()
                rec.saw.discard(target)
            if rec.mod is not None:
                try:
                    self._share(rec.mod)
                except TemplateFail:
                    rec.failed = True
                    raise
        closure: set[str] = set()
        for op in rec.ops:
            if isinstance(op, tuple):
                closure.add(op[0])
                closure |= self.records[op[0]].closure
        rec.closure = frozenset(closure)
        rec.done = True
        self.pool.builds += 1
        return rec.mod

    def _share(self, root: object) -> None:
        """Every object the module's namespace reaches becomes shared (never written)."""
        ids = self.ids
        todo = [root]
        while todo:
            x = todo.pop()
            if isinstance(x, ATOMIC) or id(x) in ids:
                continue
            t = type(x)
            if t is tuple or t is frozenset:
                todo.extend(x)
                continue
            ids.add(id(x))
            if t is dict:
                todo.extend(x.keys())
                todo.extend(x.values())
            elif t is list or t is set:
                todo.extend(x)
            elif t is Fn:
                todo += [x.defaults, x.bound, x.globals]
            elif t is Cls:
                todo += [x.attrs, x.bases]
            elif t is Obj:
                todo += [x.cls, x.attrs]
            elif t is ProjMod:
                todo.append(x.globals)
            elif t is Tensor:
                todo += [x.view_of, x.values]
            elif t is ArgParser:
                todo.append(x.defaults)
            elif t is Property:
                todo.append(x.fn)
            elif t is TensorMethod:
                todo.append(x.tensor)
            elif t is GroupMethod:
                todo.append(x.group)
            elif t is ParserMethod:
                todo.append(x.parser)
            else:
                raise TemplateFail  # a kind of object this module does not know to share

    # ------------------------------------------------------------------ taking them
    def instantiate(self, rank, target: str) -> tuple[bool, ProjMod | None]:
        """`import target` in `rank` from this world's run of it, when its outcome is the same;
        (False, None) when the rank must run the module itself."""
        rec = self.get(target, rank.ev.short)
        if rec is None:
            return False, None
        plan = _Plan(self, rank)
        if not plan.visit(rec, rank.depth):
            return False, None
        if rank.steps + plan.cost > MAX_STEPS or rank.ev.work + plan.cost > MAX_WORK:
            return False, None  # the run would stop at the budget: run it, to stop alike
        rank.steps += plan.cost
        rank.ev.work += plan.cost
        decided = rank.decided
        fps = rank.ev.fps
        nodes = fps.nodes
        for r in plan.added:
            rank.modules[r.name] = r.mod
            for op in r.ops:
                if isinstance(op, tuple):
                    continue
                for line, b in op.decided:
                    decided.setdefault(line, set()).add(b)
                for h, node in op.nodes:
                    if len(nodes) < MAX_FP_NODES:
                        nodes.setdefault(h, node)
                fps.data.update(op.data)
                if op.approx:
                    rank.ev.approx = True
        if plan.last_line is not None:
            rank.line = plan.last_line
        return True, rec.mod


class _Plan:
    """The imports a rank's own run of a module would make, in order, and what they cost."""

    def __init__(self, templates: World, rank) -> None:
        self.records = templates.records
        self.rank = rank
        self.present = rank.modules
        self.added: list[Record] = []
        self.names: set[str] = set()
        self.stack: list[str] = []  # the imports under way, outermost first
        self.cost = 0
        self.last_line: int | None = None
        self.own_module = rank.ev.facts.module

    def visit(self, rec: Record, depth: int) -> bool:
        rank = self.rank
        if rec.name == self.own_module or rec.failed or not rec.done:
            return False  # the evaluated file is opaque to itself
        if rec.forced and rank.ev.plan is not None:
            return False
        if depth + rec.reach >= MAX_DEPTH:
            return False
        if rec.saw and not rec.saw <= set(self.stack):
            return False  # it saw half-imported a module this rank is not importing
        self.added.append(rec)
        self.stack.append(rec.name)
        self.names.add(rec.name)
        for op in rec.ops:
            if isinstance(op, Chunk):
                self.cost += op.ticks
                if op.ticks:
                    self.last_line = op.last_line
                continue
            name, rel = op
            if name in self.names:
                continue
            sub = self.records.get(name)
            if sub is None:
                return False
            if name in self.present:
                if not self._unchanged(name, sub):
                    return False
                continue
            if not self.visit(sub, depth + rel):
                return False
        self.stack.pop()
        return True

    def _unchanged(self, name: str, sub: Record) -> bool:
        """The rank's module is the shared one, and no global of it (nor of what it imported)
        was rebound by the rank."""
        if self.present[name] is not sub.mod:
            return False
        overlays = self.rank.overlays
        if not overlays:
            return True
        for n in (name, *sub.closure):
            r = self.records.get(n)
            if r is not None and r.mod is not None and id(r.mod.globals) in overlays:
                return False
        return True


def enter(fe) -> None:
    """The shared objects of the evaluated file `fe` (None: none) are the ones writes are
    checked against."""
    world = getattr(fe, "tworld", None)
    SHARED.ids = world.ids if world is not None else frozenset()


__all__ = ["TemplateFail", "Templates", "enter"]
