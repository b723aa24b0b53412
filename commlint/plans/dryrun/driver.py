"""The parent side of a dry-run: start one process per rank, collect, repeat until stable.

Ranks run one OS process each, started by a launcher (`launch.py`: forked from this warm
process by default, or on the nodes of a Ray cluster), each with a channel to this driver. A
pass runs the ranks that need it, `jobs` at a time; a rank runs again in the next
pass only when the values it would receive changed (see `values.py`). A rank is stopped when
it makes no progress for --timeout (no CPU time, not even waiting for a CPU, no message, no wait
for its peers) or used --timeout of CPU time: a signal it raises at its line, SIGKILL from here
as a last resort (`_pass`); load alone never stops one. Every process of the run is kept in
hand by `procs.Keeper` where it runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from commlint import callsites
from commlint.plans.dryrun import procs
from commlint.plans.dryrun.child import RankSpec
from commlint.plans.dryrun.classes import Pull, validated_actions
from commlint.plans.dryrun.launch import Ended, Launcher, LauncherError, NodeUsage
from commlint.plans.dryrun.merge import rank_spec
from commlint.plans.dryrun.recorder import USER_PROGRAMS, is_user_file, short_path
from commlint.plans.dryrun.values import Key, ValueTable
from commlint.trace import RankEnd, Trace

GRACE_SECONDS = 3.0
REAL_BUDGET = 1 << 30  # default --real-budget: 1 GiB of tensors per rank
_STABLE_PASSES = 2  # reruns in a row with unchanged traces that count as settled
# passes a stopped rank may wait for values still on their way before the run counts as
# settled (values that keep changing otherwise settle after _STABLE_PASSES)
_LIMIT_WAIT = 6
_EXACT_PASSES = 16  # passes the exact phase (model data by value, after a rank raised) may add


@dataclass
class RankRun:
    """What one run of one rank produced."""

    actions: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[str, list[int]] = field(default_factory=dict)
    sent: dict[Key, Any] = field(default_factory=dict)
    reads: dict[Key, tuple] = field(default_factory=dict)
    end: dict[str, Any] | None = None
    ended: bool = False
    fake_limit: tuple[str, str | None, bool] | None = None
    # bytes the rank's live fake tensors stood for when fake tensors stopped it
    fake_bytes: int = 0
    # symbolic steering: (decision `site#n`, read site, test site, outcome, uniform, how the
    # number was made: `fingerprint.py`) in order
    decisions: list[tuple[str, str | None, str | None, bool, bool, str | None]] = field(
        default_factory=list
    )
    backend: str | None = None
    seconds: float = 0.0
    cpu_seconds: float | None = None
    assumes: str | None = None
    peak_bytes: int | None = None
    output: str = ""  # what the program printed (stdout and stderr) in this run
    stopped: str | None = None  # why the rank did not reach its program's end, if it did not
    leftover: int = 0  # processes the rank started that were still running at its end
    # fake tensors stopped it after it was already part of a hang the checker found: what
    # the stop would have been, and the hang (a real run never gets past it: `_behind_hang`)
    behind: str | None = None
    # torch's name of each group the rank created, in call order (CL212)
    creations: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # the user's files it ran (`executed.py`)
    classes: dict[str, Any] | None = None  # its rank-class record (`rankexpr.ClassRecord`)


@dataclass
class DryRunOptions:
    program: str
    args: list[str]
    world_size: int
    nproc_per_node: int
    ranks: list[int]
    timeout: float = 60.0
    steps: int | None = None
    jobs: int = 2
    max_passes: int = 48
    mode: str = "fake"
    # Largest real re-run allowed, in bytes of tensors per rank (the live fake tensors when
    # fake tensors stopped a rank); None: no limit. Past it the rank is reported as stopped.
    real_budget: int | None = REAL_BUDGET
    # queue model of the verdict (None: the backend the program asks for), also used to
    # tell whether a rank fake tensors stopped had already hung (`_behind_hang`)
    model: str | None = None
    # `-m module`: run as `python -m module` (`program` is then its file, for the report)
    module: str | None = None
    # variables every rank sees over the ones torchrun sets (`--master-addr`, `--role` ...)
    env: dict[str, str] = field(default_factory=dict)
    # the machine the job runs on: "cuda" (GPUs, played by stand-ins) or "cpu" (none)
    device: str = "cuda"
    # where the ranks run (`launch.py`): "local" (forked here) or "ray"
    launcher: str = "local"
    # what ranks recorded elsewhere sent (another Slurm task's: `slurm_launcher.py`),
    # delivered as values of an earlier pass are
    values: ValueTable | None = None
    rank_classes: bool = False  # one recorded rank per program path (`classes.py`)


@dataclass
class Incomplete:
    """A rank whose program was not seen to its end: the verdict cannot cover it."""

    rank: int
    site: str | None
    why: str


@dataclass
class DryRunResult:
    runs: dict[int, RankRun]
    passes: int
    mode: str
    notes: list[str]
    converged: bool
    seconds: float
    unsettled: list[int] = field(default_factory=list)
    # rank-local values that decide what a rank communicates (CL211; `_explore`)
    steering: list[dict[str, Any]] = field(default_factory=list)
    # per node of the launcher: ranks started, their CPU seconds, their largest peak
    usage: list[NodeUsage] = field(default_factory=list)
    derived: dict[int, int] = field(default_factory=dict)  # rank classes: derived -> recorded

    def incomplete(self) -> list[Incomplete]:
        """Every rank that did not reach the end of its program (stopped at the time limit,
        killed, lost its pipe) or whose received values never settled, in rank order."""
        out = []
        for rank in sorted(self.runs):
            run = self.runs[rank]
            site = run.end.get("site") if run.end else None
            timed_out = run.end and run.end.get("kind") == "timeout"
            if run.stopped or timed_out:
                out.append(Incomplete(rank, site, run.stopped or run.end["message"]))
            elif rank in self.unsettled:
                out.append(
                    Incomplete(
                        rank,
                        site,
                        f"the values it receives from other ranks still changed after "
                        f"{self.passes} pass{'es' if self.passes != 1 else ''} "
                        "(--max-passes): its last run may not be the one a real run makes",
                    )
                )
        return out

    def trace(self, options: DryRunOptions, ranks: list[int] | None = None) -> Trace:
        """One trace with the given ranks (all recorded ranks by default)."""
        ranks = sorted(self.runs) if ranks is None else ranks
        groups: dict[str, list[int]] = {}
        backend = None
        for r in ranks:
            groups.update(self.runs[r].groups)
            backend = backend or self.runs[r].backend
        per_rank = validated_actions(self.runs, self.derived, ranks)  # `classes.py`
        ends = {r: RankEnd(**self.runs[r].end) for r in ranks if self.runs[r].end}
        meta: dict[str, object] = {
            "program": options.program,
            "args": options.args,
            "nproc_per_node": options.nproc_per_node,
            "tensors": self.mode,
            "device": options.device,
            "passes": self.passes,
            "recorded_ranks": rank_spec(ranks),
        }
        if options.rank_classes:
            derived = [r for r in ranks if r in self.derived]
            meta["rank_classes"] = {"recorded": len(ranks) - len(derived), "derived": len(derived)}
        if options.steps:
            meta["steps"] = options.steps
        assumed = sorted({self.runs[r].assumes for r in ranks if self.runs[r].assumes})
        if assumed:
            meta["assumes"] = "; ".join(assumed)
        if self.notes:
            meta["notes"] = self.notes
        creations = {str(r): self.runs[r].creations for r in ranks if self.runs[r].creations}
        if creations:
            meta["group_creations"] = creations
        steering = [s for s in self.steering if s["rank"] in ranks]
        if steering:
            meta["steering"] = steering
        stopped = [i for i in self.incomplete() if i.rank in ranks]
        if stopped:
            # Saved with the trace: `commlint plan DIR` must not pass what was not seen either.
            meta["incomplete"] = {str(i.rank): {"site": i.site, "why": i.why} for i in stopped}
        if len(ranks) < options.world_size:
            meta["partial"] = True
        return Trace(
            world_size=options.world_size,
            groups=groups,
            ranks=per_rank,
            ends=ends,
            backend=backend,
            source="dryrun",
            meta=meta,
        )


def _run_pass(
    options: DryRunOptions,
    ranks: list[int],
    table: ValueTable,
    mode: str,
    on_done: Callable[[int], None] | None,
    launcher: Launcher,
    symbolic: bool = False,
    flips: dict[int, tuple[str, ...]] | None = None,
    pull: Pull | None = None,
) -> dict[int, RankRun]:
    launcher.begin(table, mode)
    clean = False
    try:
        runs = _pass(options, ranks, table, mode, on_done, launcher, symbolic, flips, pull)
        clean = True
        return runs
    finally:
        if not clean:  # interrupted: stop them at once (`Launcher.close`: the rest)
            launcher.abandon()
        launcher.end_pass(clean)


@dataclass
class _Running:
    """A rank of this pass, and what the driver knows of its progress."""

    rank: int
    start: float
    idle_since: float  # when it last made progress (CPU, a message, a wait for peers)
    last: procs.Sample | None = None
    # stopped by the driver: (why: "idle" | "cpu", when, its CPU seconds then)
    stop: tuple[str, float, float] | None = None


def _pass(
    options: DryRunOptions,
    ranks: list[int],
    table: ValueTable,
    mode: str,
    on_done: Callable[[int], None] | None,
    launcher: Launcher,
    symbolic: bool,
    flips: dict[int, tuple[str, ...]] | None,
    pull: Pull | None,
) -> dict[int, RankRun]:
    """One pass over `ranks`; `pull` (rank classes) names, of the senders a rank waits for
    that are not in the pass, those to start in it too, and the values to assume the others
    send (checked after the pass: `classes.record_by_class`)."""
    pending = list(ranks)
    running: dict[int, _Running] = {}
    runs: dict[int, RankRun] = {r: RankRun() for r in ranks}
    # Live delivery (`channel.Live`): what each rank sent in this pass, and the receives
    # waiting for it (rank -> (key, senders)), answered through the launcher. Each wait keeps
    # the senders it still misses, and each key its waiters: a value that arrives or a rank
    # that ends costs only the waits it concerns (1,024 ranks each waiting for all).
    sent_now: dict[Any, dict[int, Any]] = {}
    waiting: dict[int, tuple[Any, list[int]]] = {}
    missing: dict[int, set[int]] = {}
    waiters: dict[Any, set[int]] = {}
    assumed: dict[Any, dict[int, Any]] = {}  # key -> sender -> the value `pull` assumes
    this_pass = set(ranks)
    timeout = options.timeout
    tick = min(1.0, max(0.05, timeout / 8))
    next_check = time.monotonic() + tick

    def answer(rank: int) -> None:
        key, senders = waiting.pop(rank)
        missing.pop(rank, None)
        waiters.get(key, set()).discard(rank)
        now, before = sent_now.get(key, {}), table.contributions(key)
        got = {}
        for s in senders:
            # what it sent now; else (not run in this pass, or ended without sending it) what
            # it sent before, as without live values
            value = now[s] if s in now else before.get(s, assumed.get(key, {}).get(s))
            if value is not None:
                got[s] = value
        launcher.reply(rank, got)

    def want(rank: int, key: Any, senders: list[int]) -> None:
        if pull is not None:  # rank classes: a message's sender started, values assumed
            start, assume = pull(key, [s for s in senders if s not in this_pass])
            for s in start:
                this_pass.add(s)
                pending.append(s)
                runs[s] = RankRun()
            if assume:
                assumed.setdefault(key, {}).update(assume)
        now = sent_now.get(key, {})
        waiting[rank] = (key, senders)
        # a sender not in this pass, or already ended, will not send now
        missing[rank] = {s for s in senders if s in this_pass and s not in finished} - set(now)
        waiters.setdefault(key, set()).add(rank)
        if not missing[rank]:
            answer(rank)

    def arrived(sender: int, key: Any | None) -> None:
        """`sender` sent its value for `key` (None: it ended, and will send nothing more)."""
        for rank in list(waiters.get(key, ()) if key is not None else missing):
            left = missing.get(rank)
            if left is not None:
                left.discard(sender)
                if not left:
                    answer(rank)

    def settle_waits() -> None:
        # A sender not started yet (-j below the world size) is started next, since a rank
        # that waits uses no CPU (it does not count against -j): a pipeline's stages then
        # exchange their values in one pass instead of one hop per pass — as long as memory
        # lasts: when no more ranks can be started, the waits are answered with what there is
        # (the previous pass's values, as without live values; a next pass delivers the rest).
        if waiting and len(waiting) == len(running) and (not pending or not can_start()):
            for rank in list(waiting):  # every rank of the pass waits: nobody will send now
                answer(rank)

    def can_start() -> bool:
        return launcher.can_start(len(running))

    finished: set[int] = set()

    def finish(rank: int, ended: Ended) -> None:
        r = running.pop(rank)
        finished.add(rank)
        if rank in waiting:
            key = waiting.pop(rank)[0]
            missing.pop(rank, None)
            waiters.get(key, set()).discard(rank)
        arrived(rank, None)
        run = runs[rank]
        run.leftover = ended.leftover
        run.seconds = time.monotonic() - r.start
        run.output = ended.output
        _keep_debug_notes(ended.debug)
        if not run.ended:
            site, why = _lost(ended.exitcode, ended.fault)
            run.end = {"kind": "exit", "message": why, "site": site or _last_site(run)}
            run.stopped = why
        if on_done:
            on_done(rank)

    def receive(rank: int, messages: list[Any]) -> None:
        r = running[rank]
        run = runs[rank]
        r.idle_since = time.monotonic()  # a message is progress
        for msg in messages:
            if msg[0] == "want":
                want(rank, msg[1], msg[2])
                continue
            if msg[0] in ("v", "v0"):
                sent_now.setdefault(msg[1], {})[rank] = msg[2] if msg[0] == "v" else None
                arrived(rank, msg[1])
                if msg[0] == "v0":
                    continue
            _handle(run, msg)

    def watch(now: float) -> None:
        """Stop a rank that made no progress for --timeout (it used no CPU and did not even
        wait for one, sent nothing, and did not wait for its peers), or that used --timeout
        of CPU time; kill one that did not end within its grace after that."""
        for rank, r in list(running.items()):
            if rank in waiting:
                r.idle_since = now  # waiting for peers: the driver answers it
                continue
            sample = launcher.sample(rank)
            if sample is not None and (
                r.last is None or sample.cpu > r.last.cpu or sample.delay > r.last.delay
            ):
                r.idle_since = now  # it computed, or was ready to but the machine was busy
            r.last = sample or r.last
            cpu = r.last.cpu if r.last else 0.0
            if r.stop is None:
                why = "cpu" if cpu >= timeout else "idle" if now - r.idle_since >= timeout else None
                if why:
                    r.stop = (why, now, cpu)
                    # the rank raises where it is (`child._run_program`), naming the line
                    launcher.stop(rank, procs.STOP_SIGNALS[why])
                continue
            why, when, cpu_then = r.stop
            if now - max(when, r.idle_since) < GRACE_SECONDS and cpu - cpu_then < GRACE_SECONDS:
                continue
            ended = launcher.kill(rank)
            run = runs[rank]
            run.end = {
                "kind": "timeout",
                "message": procs.STOP_MESSAGES[why].format(t=timeout)
                + "; it did not respond to the limit and was killed",
                "site": _last_site(run),
            }
            run.ended = True
            finish(rank, ended)

    while pending or running:
        while (
            pending
            and len(running) - len(waiting) < max(1, options.jobs)
            and (not running or can_start())
        ):
            rank = pending.pop(0)
            launcher.start(
                RankSpec(
                    program=options.program,
                    module=options.module,
                    env=options.env,
                    device=options.device,
                    args=options.args,
                    rank=rank,
                    world_size=options.world_size,
                    nproc_per_node=options.nproc_per_node,
                    mode=mode,
                    timeout=timeout,
                    steps=options.steps,
                    symbolic=symbolic,
                    flips=(flips or {}).get(rank, ()),
                    rank_classes=options.rank_classes,
                )
            )
            begun = time.monotonic()
            running[rank] = _Running(rank, begun, begun)
        for event in launcher.wait(min(0.2, tick)):
            if event.rank not in running:
                continue
            receive(event.rank, event.messages)
            if event.ended is not None:
                finish(event.rank, event.ended)
        settle_waits()
        now = time.monotonic()
        if now >= next_check:
            next_check = now + tick
            watch(now)
    return runs


_FAULT_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _lost(exitcode: int | None, fault: str) -> tuple[str | None, str]:
    """(site, why) of a rank that ended without reporting its end."""
    site = None
    for m in map(_FAULT_FRAME.match, fault.splitlines()):  # most recent call first
        if m and is_user_file(m["file"]):
            site = f"{short_path(m['file'])}:{m['line']}"
            break
    if exitcode is not None and exitcode < 0:
        with contextlib.suppress(ValueError):
            name = signal.Signals(-exitcode).name
            return site, f"killed by {name} (the process crashed or was killed)"
        return site, f"killed by signal {-exitcode}"
    return site, (
        f"its process ended (code {exitcode}) without reporting its end: the pipe to "
        "commlint was closed or lost, so what it did after its last recorded action is unknown"
    )


def format_bytes(n: int) -> str:
    """`1.5 GiB`, `300 MiB`: a size for a message."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}".replace(".0 ", " ")
    return f"{n} bytes"


def _last_site(run: RankRun) -> str | None:
    """The call site of the last action a rank recorded that has one."""
    return next((a["site"] for a in reversed(run.actions) if a.get("site")), None)


def _handle(run: RankRun, msg: tuple) -> None:
    kind = msg[0]
    if kind == "a":
        run.actions.append(msg[1])
    elif kind == "g":
        run.groups[msg[1]] = msg[2]
    elif kind == "gc":
        run.creations.append({"name": msg[1], "ranks": msg[2], "site": msg[3]})
    elif kind == "v":
        run.sent[msg[1]] = msg[2]
    elif kind == "r":
        run.reads[msg[1]] = msg[2]
    elif kind == "end":
        run.end = msg[1]
        run.ended = True
    elif kind == "fake-limit":
        run.fake_limit, run.fake_bytes = (msg[1], msg[2], msg[3]), msg[4]
    elif kind == "decision":
        run.decisions.append(tuple(msg[1:7]))  # type: ignore[arg-type]
    elif kind == "assume":
        if not run.assumes:
            run.assumes = msg[1]
        elif msg[1] not in run.assumes:
            run.assumes = f"{run.assumes}; {msg[1]}"
    elif kind == "usage":
        run.cpu_seconds, run.peak_bytes = msg[1], msg[2]
    elif kind == "backend":
        run.backend = msg[1]
    elif kind == "files":
        run.files = msg[1]
    elif kind == "classes":
        run.classes = msg[1]


def dry_run(
    options: DryRunOptions,
    on_start_pass: Callable[[int, int], None] | None = None,
    on_done: Callable[[int], None] | None = None,
) -> DryRunResult:
    """Record every requested rank; rerun ranks until what they receive stops changing."""
    start = time.monotonic()
    mode = options.mode
    USER_PROGRAMS.update({options.program, os.path.abspath(options.program)})
    if options.module:
        callsites.claim_program_package(options.module)
    with (
        procs.interruptible(),  # SIGTERM, SIGHUP, SIGINT: the run's processes end first
        opened(
            options.launcher, mode, options.program, options.module
        ) as launcher,  # nothing the ranks start outlives it
    ):
        if not options.jobs:  # as many as the launcher's CPUs
            options = replace(options, jobs=launcher.default_jobs() or default_jobs())
        run = _by_class if options.rank_classes else _dry_run  # `classes.py`
        result = run(options, mode, start, on_start_pass, on_done, launcher)
        result.usage = launcher.usage()
        return result


def _by_class(options: DryRunOptions, mode: str, start: float, *rest: Any) -> DryRunResult:
    from commlint.plans.dryrun.classes import record_by_class

    def run_pass(batch: list[int], table: ValueTable, pull: Pull) -> dict[int, RankRun]:
        return _run_pass(options, batch, table, mode, *rest[1:], pull=pull)

    got = record_by_class(options, run_pass, rest[0])
    if isinstance(got, str):  # what classes cannot carry: every rank recorded
        result = _dry_run(replace(options, rank_classes=False), mode, start, *rest)
        result.notes.insert(0, f"rank classes: {got}; every rank was recorded")
        return result
    runs, derived, passes, notes = got
    return DryRunResult(runs, passes, mode, notes, True, time.monotonic() - start, derived=derived)


@contextlib.contextmanager
def opened(name: str, mode: str, program: str, module: str | None) -> Iterator[Launcher]:
    """The launcher called `name` (`launch.py`), open for a run of `program` (`-m module`);
    closed after."""
    launcher: Launcher
    if name == "local":
        from commlint.plans.dryrun.local_launcher import LocalLauncher

        launcher = LocalLauncher()
    elif name == "ray":
        from commlint.plans.dryrun.ray_launcher import RayLauncher

        launcher = RayLauncher(program, module)
    else:
        raise LauncherError(f"--launcher {name}: not a rank launcher (one of local, ray)")
    try:
        launcher.open(mode)
        yield launcher
    finally:
        launcher.close()


def _fresh_table(options: DryRunOptions) -> ValueTable:
    """The values a run starts from: none, or what ranks recorded elsewhere sent."""
    if options.values is None:
        return ValueTable()
    return ValueTable({k: dict(v) for k, v in options.values.values.items()})


def _keep_debug_notes(notes: dict[str, bytes]) -> None:
    """`COMMLINT_DEBUG=1`: a rank's exception tracebacks (written into its scratch: its view
    of the working folder is its own), appended to their files in the working folder."""
    for name, text in notes.items():
        with contextlib.suppress(OSError), open(name, "ab") as out:
            out.write(text)


def _dry_run(
    options: DryRunOptions,
    mode: str,
    start: float,
    on_start_pass: Callable[[int, int], None] | None,
    on_done: Callable[[int], None] | None,
    launcher: Launcher,
) -> DryRunResult:
    notes: list[str] = []
    table = _fresh_table(options)
    runs: dict[int, RankRun] = {}
    todo = list(options.ranks)
    passes = 0
    converged = False
    confirm: tuple[int, str] | None = None
    stable = 0  # passes in a row whose reruns recorded the same communication as before
    fallback_note = ""
    symbolic = False  # comparisons of uncomputed numbers are decisions (over the budget)
    decided_first = False  # ... chosen within the budget (real tensors if they steer)
    settled_at: int | None = None  # the pass after which only values, not traces, changed
    exact_from: int | None = None  # the pass after which model data's values counted too
    exact_unsettled = False  # ... and they had not settled when the exact phase ended
    while todo and passes < options.max_passes:
        passes += 1
        if on_start_pass:
            on_start_pass(passes, len(todo))
        new = _run_pass(options, todo, table, mode, on_done, launcher, symbolic)
        same = all(
            r in runs and (runs[r].actions, runs[r].end) == (run.actions, run.end)
            for r, run in new.items()
        )
        stable = stable + 1 if same else 0
        runs.update(new)
        for r, run in new.items():
            table.replace_rank(r, run.sent)
        todo = stale_ranks(runs, table)
        converged = not todo
        if (
            todo
            and exact_from is not None
            and (passes - exact_from >= _EXACT_PASSES or passes >= options.max_passes)
        ):
            # The exact phase is a second look at a run that had settled: past its share of
            # passes, the last pass stands (as when only values kept changing, below).
            todo, converged, exact_unsettled = [], True, True
        if (
            todo
            and stable >= _STABLE_PASSES
            and not table.exact_model
            # a rank fake tensors stopped, that would receive something else: the value it
            # stopped on may be on its way (a pipeline's vote, one hop per pass)
            and (
                stable >= _STABLE_PASSES + _LIMIT_WAIT or not any(runs[r].fake_limit for r in todo)
            )
        ):
            # Data that only flows (a mismatched program's activations feeding each other)
            # may never settle; what matters is the communication, and it stopped changing.
            settled_at = passes
            todo, converged = [], True
        if not todo and mode == "real" and not table.exact_model and _raised(runs):
            # A rank raised, and model data (gradient buckets) was delivered by who sent it,
            # not by value: a program checking gradient sync reads those values. Run again
            # until they settle too (each pass settles the next link of the chain of steps).
            table.exact_model = True
            todo = stale_ranks(runs, table)
            if todo:
                converged, stable, settled_at, exact_from = False, 0, None, passes
                continue
        # Fake tensors cannot answer everything (a value read, a data-dependent shape), and
        # an exception under them may be theirs rather than the program's: record every rank
        # again with real CPU tensors, once no rank will run again (what a rank sends next
        # may be the value a stopped rank waits for); a known limit is named first.
        limited = {r: run.fake_limit for r, run in runs.items() if run.fake_limit}
        hard = {r: lim for r, lim in limited.items() if lim[2]} if not todo else {}
        behind = _behind_hang(options, runs, limited) if mode == "fake" and limited else None
        if behind is not None:
            # Every rank fake tensors stopped had already hung (or failed) at a communication
            # the checker proves wrong: a real run never gets to the stop, so nothing more is
            # needed — no real tensors. Settle first (its values may still change the hang).
            if converged:
                for r, (hang, site) in behind.items():
                    message, stop, _ = limited[r]
                    runs[r].behind = f"{stop or '?'} ({message})"
                    runs[r].end = None
                    notes.append(
                        f"rank {r} stopped under fake tensors at {stop or '?'} ({message}), "
                        f"after its part in {hang} at {site}: a real run never gets there"
                    )
            continue
        if mode == "fake" and (hard or (limited and converged)) and passes < options.max_passes:
            rank, (message, site, _) = min((hard or limited).items())
            where = f" at {site}" if site else ""
            need = max(runs[r].fake_bytes for r in limited)
            within = options.real_budget is None or need <= options.real_budget
            if message.startswith(_STEERS) and not symbolic and within:
                # A test of a number fake tensors did not compute: decided first, as past the
                # budget, and explored where rank-local (`_explore`). Real tensors are needed
                # only if the value turns out to decide what a rank communicates.
                symbolic = decided_first = True
                notes.append(
                    f"rank {rank} tested a number fake tensors did not compute{where}: every "
                    "rank took the outcome its placeholder gives there, and the other outcome "
                    "of each test of a rank-local value was recorded too"
                )
                table, runs, todo = _fresh_table(options), {}, list(options.ranks)
                converged, stable, settled_at = False, 0, None
                continue
            if options.real_budget is not None and need > options.real_budget:
                # Real tensors of this size cost the real model's memory and compute on
                # every rank: never done unasked. A comparison of a number fake tensors did
                # not compute becomes a decision, the same on every rank (and the other
                # outcome explored after, `_explore`); anything else stops the ranks.
                over_budget = (
                    f"recording it again with real tensors would hold at least "
                    f"{format_bytes(need)} per rank, over the real re-run budget of "
                    f"{format_bytes(options.real_budget)} (--real-budget); run with "
                    "--tensors real to compute it anyway"
                )
                steers = message.startswith(_STEERS)
                if steers and not symbolic:
                    symbolic = True
                    notes.append(
                        f"rank {rank} tested a number fake tensors did not compute{where}; "
                        f"{over_budget}. Every rank took the outcome its placeholder gives "
                        "there, the same on every rank, and the other outcome of each test of "
                        "a rank-local value was recorded too"
                    )
                    table, runs, todo = _fresh_table(options), {}, list(options.ranks)
                    converged, stable, settled_at = False, 0, None
                    continue
                for r, (msg, _, is_limit) in (hard or limited).items():
                    why = (
                        f"fake tensors cannot go on ({msg})"
                        if is_limit
                        else f"it raised {msg} under fake tensors, which a real run may not"
                    )
                    runs[r].stopped = f"{why}; {over_budget}"
                break
            fallback_note = (
                f"rank {rank} stopped under fake tensors{where} ({message}); every rank was "
                f"recorded again with small real CPU tensors ({len(limited)} of {len(runs)} "
                f"rank{'s' if len(runs) != 1 else ''} needed real values)"
            )
            notes.append(fallback_note)
            if not hard:
                confirm = (rank, message)
            mode = "real"
            table = _fresh_table(options)
            runs = {}
            todo = list(options.ranks)
            converged = False
            stable = 0
            settled_at = None
    if exact_from is not None:
        notes.append(
            f"a rank raised, so gradient buckets were delivered by value too: {passes} passes "
            f"({passes - exact_from} after pass {exact_from})"
            + (
                ", and their values still changed: the traces are those of the last pass"
                if exact_unsettled
                else ""
            )
        )
    if settled_at is not None:
        notes.append(
            "values exchanged between ranks kept changing, but the communication they steer "
            f"did not change for {_STABLE_PASSES} passes: the traces are those of pass "
            f"{settled_at}"
        )
    if confirm is not None:
        rank, message = confirm
        end = runs[rank].end if rank in runs else None
        if end and end.get("message") == message:
            notes.remove(fallback_note)  # the program's own exception, not a fake-tensor limit
    if mode == "fake":
        for run in runs.values():
            if run.fake_limit and run.fake_limit[2] and not run.stopped and not run.behind:
                run.stopped = f"fake tensors cannot run it ({run.fake_limit[0]})"
    unsettled = [] if converged else sorted(todo)
    steering = _explore(options, runs, table, launcher, notes) if symbolic else []
    if decided_first and steering and mode == "fake":
        sites = {s["test"] for s in steering}
        needed = [r for r, run in runs.items() if any(d[2] in sites for d in run.decisions)]
        return _real_for_steering(
            options, start, on_start_pass, on_done, launcher, steering, needed
        )
    return DryRunResult(
        runs, passes, mode, notes, converged, time.monotonic() - start, unsettled, steering
    )


def _real_for_steering(
    options: DryRunOptions,
    start: float,
    on_start_pass: Callable[[int, int], None] | None,
    on_done: Callable[[int], None] | None,
    launcher: Launcher,
    steering: list[dict[str, Any]],
    needed: list[int],
) -> DryRunResult:
    """A value fake tensors did not compute decides what a rank communicates (`_explore`
    found both outcomes of its test communicate differently), and the real re-run is within
    the budget: record every rank with small real CPU tensors, where the test takes the
    outcome the real values give (exact: one that is the same on every rank is no finding)."""
    first = steering[0]
    result = _dry_run(options, "real", start, on_start_pass, on_done, launcher)
    n = len(options.ranks)
    result.notes.insert(
        0,
        f"rank {first['rank']} stopped under fake tensors at {first['test'] or '?'}: the "
        f"value read at {first['read'] or '?'} decides what it communicates there; every rank "
        f"was recorded again with small real CPU tensors ({len(needed) or 1} of {n} "
        f"rank{'s' if n != 1 else ''} needed real values)",
    )
    return result


# findings that hold whatever a rank does after its recorded actions: a wait-for cycle, calls
# that never match, a group named differently; not a peer left waiting at a rank's end
_HANGS_ANYWAY = frozenset({"CL201", "CL203", "CL204", "CL205", "CL208", "CL212"})
_STRANDED = frozenset({"CL202", "CL210"})  # waiting at a rank's end: the waiters are stuck


def _behind_hang(
    options: DryRunOptions, runs: dict[int, RankRun], limited: dict[int, Any]
) -> dict[int, tuple[str, str]] | None:
    """For each rank fake tensors stopped, the hang it took part in before its stop — a
    finding of `_HANGS_ANYWAY` naming one of its recorded actions, or of `_STRANDED` where
    it waits for a rank seen to its end, found on every rank's trace with the stopped ranks'
    ends left out — or None when some stopped rank has none (or only some ranks were
    recorded). A real run never gets past such a hang, so what
    fake tensors could not compute after it does not matter."""
    if sorted(runs) != list(range(options.world_size)) or set(options.ranks) != set(runs):
        return None
    from commlint.graph.check import check_trace

    cut = {r: replace(run, end=None) if r in limited else run for r, run in runs.items()}
    draft = DryRunResult(cut, 0, "fake", [], True, 0.0)
    try:
        trace = draft.trace(options)
        checked = check_trace(trace, options.model, options.program)
    except Exception:  # a trace the checker cannot take: fall back as before
        return None
    findings = checked.findings
    if any(outs[r].status == "finished" for outs in checked.outcomes.values() for r in limited):
        return None  # some stopped rank gets past its recorded calls (a reduce-op mismatch)
    out: dict[int, tuple[str, str]] = {}
    for f in findings:
        if f.severity != "error":
            continue
        if f.code in _STRANDED:
            # a rank left waiting for a peer that raised, exited or finished: holds when that
            # peer was seen to its end (not one of the ranks stopped here)
            if {loc.rank for loc in f.related} & set(limited):
                continue
        elif f.code not in _HANGS_ANYWAY:
            continue
        involved = {a.rank for a in f.actions} | {e.rank for e in f.cycle or ()}
        site = next((a.site for a in f.actions if a.site), None) or "?"
        for r in involved & set(limited):
            out.setdefault(r, (f"{f.code} {f.name}".strip(), site))
    return out if set(out) == set(limited) else None


_STEERS = "UnreadValueSteers"  # the fake-tensor limit of a comparison of an unread number
_MAX_EXPLORED = 8  # tests of rank-local values whose other outcome is recorded, per run


def _signature(a: dict[str, Any]) -> tuple:
    return tuple(a.get(k) for k in ("op", "group", "peer", "root", "shape", "dtype", "reduce_op"))


def _describe(a: dict[str, Any] | None) -> str:
    if a is None:
        return "nothing more"
    return f"{a.get('label') or a['op']} on group {a.get('group', 'WORLD')}"


def stale_ranks(runs: dict[int, RankRun], table: ValueTable) -> list[int]:
    """The ranks that would receive something else than in their last run."""
    return [
        r
        for r, run in runs.items()
        if any(table.signature(key, r) != sig for key, sig in run.reads.items())
    ]


def _raised(runs: dict[int, RankRun]) -> bool:
    return any((run.end or {}).get("kind") == "exception" for run in runs.values())


def _explore(
    options: DryRunOptions,
    runs: dict[int, RankRun],
    table: ValueTable,
    launcher: Launcher,
    notes: list[str],
) -> list[dict[str, Any]]:
    """For the first test at each line of a rank-local number fake tensors did not compute
    (that not every rank made alike):
    run the first rank that made it again with the other outcome (the values its peers
    delivered unchanged) and compare what it communicates. Where the two differ, the value
    decides what the rank communicates: ranks whose values differ make different calls
    (CL211). A value every rank shares needs no exploration: a collective's result, or a
    number every rank made alike (the same fingerprint on every rank: same seeds, same data,
    same operations)."""
    made: dict[str, set[str | None]] = {}
    for run in runs.values():
        for key, *_, fp in run.decisions:
            made.setdefault(key, set()).add(fp)
    everyone = not any(run.stopped for run in runs.values()) and sorted(runs) == list(
        range(options.world_size)
    )
    alike = {
        key
        for key, fps in made.items()
        if everyone
        and len(fps) == 1
        and None not in fps
        and all(any(d[0] == key for d in run.decisions) for run in runs.values())
    }
    # per test site: the first decision there of a rank-local number not made alike (a loop's
    # test may be alike at its first pass and rank-local at the next)
    first: dict[str | None, tuple[int, str, str | None, bool]] = {}
    sites: dict[str | None, str | None] = {}
    for r in sorted(runs):
        if runs[r].stopped:
            continue
        for key, read, site, outcome, uniform, _ in runs[r].decisions:
            if uniform:
                continue
            sites.setdefault(site, read)
            if key not in alike and site not in first:
                first[site] = (r, key, read, outcome)
    for site, read in sites.items():
        if site not in first:
            notes.append(
                f"the value read at {read or '?'} and tested at {site} is made alike on every "
                "rank (the same seeds, data and operations): every rank takes the same outcome "
                "there, as in a real run"
            )
    found = []
    for site, (r, key, read, outcome) in list(first.items())[:_MAX_EXPLORED]:
        other = _run_pass(options, [r], table, "fake", None, launcher, True, {r: (key,)})[r]
        base = runs[r].actions
        i = next(
            (
                k
                for k, (a, b) in enumerate(zip(base, other.actions, strict=False))
                if _signature(a) != _signature(b)
            ),
            min(len(base), len(other.actions)),
        )
        if i == len(base) == len(other.actions):
            continue  # both outcomes communicate alike
        if i == len(other.actions) and (
            other.stopped or other.fake_limit or (other.end or {}).get("kind") == "exception"
        ):
            # the other outcome stopped early — what it would communicate is unknown — or
            # the program raised there: an error path (torchrun ends every rank), not a call
            # its peers wait for
            continue
        then = base[i] if i < len(base) else None
        otherwise = other.actions[i] if i < len(other.actions) else None
        found.append(
            {
                "rank": r,
                "read": read,
                "test": site,
                "taken": outcome,
                "then": _describe(then),
                "then_site": (then or {}).get("site"),
                "otherwise": _describe(otherwise),
                "otherwise_site": (otherwise or {}).get("site"),
                "index": i,
            }
        )
    return found


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)))
