"""The per-rank traces of every file (`perrank.py`), judged by the graph checker, as source
findings: CL115 (a hang), CL116 (a mismatch), CL117 (group members that differ between ranks),
CL118 (collectives issued while iterating a set). Also what the evaluation proves: the taint
rules drop a finding on code that every rank of every world size ran to its end cleanly."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from commlint.lint.analyze import Program, RawFinding
from commlint.lint.ir import CallSite, ModuleCall, Pos, communicates, iter_nodes
from commlint.lint.perrank import DEFAULT_WORLD_SIZES, FileEval, WorldRun, evaluate_file, iter_sites
from commlint.lint.perrank_units import ModuleIndex

HANG = frozenset({"CL201", "CL202", "CL203", "CL207", "CL209", "CL210"})
MISMATCH = frozenset({"CL204", "CL205", "CL208"})
TAINT_CODES = frozenset({"CL101", "CL102", "CL103", "CL107", "CL108", "CL109", "CL110"})


@dataclass
class FileVerdict:
    fe: FileEval
    runs: list[WorldRun]
    findings: list[RawFinding] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every entry point ran to its end on every rank of every world size evaluated (the
        sizes the file declares, `--nproc-per-node 4`, else the configured ones)."""
        return bool(self.runs) and all(r.complete for r in self.runs)

    def iterated_uniformly(self, line: int) -> bool:
        """The `for` loop at `line` ran as many times on every rank (each time it was reached)
        in every run, and every run was complete and exact."""
        hit = False
        for r in self.runs:
            seen = r.trips.get(line)
            if seen:
                hit = True
                if len(seen) > 1:
                    return False
        return hit and all(r.complete and r.exact for r in self.runs)

    def decided_uniformly(self, line: int) -> bool:
        """The condition at `line` took one value on every rank of every complete run."""
        seen: set[bool] = set()
        hit = False
        for r in self.runs:
            if not r.complete:
                continue
            vals = r.decided.get(line)
            if vals:
                hit = True
                seen |= vals
        return hit and len(seen) == 1 and all(r.complete and r.exact for r in self.runs)


def verdicts(program: Program) -> dict[str, FileVerdict]:
    memo = program._perrank
    if memo is not None:
        return memo
    sizes = tuple(program.options.get("world_sizes") or DEFAULT_WORLD_SIZES)
    out: dict[str, FileVerdict] = {}
    called: dict[str, set[str]] = {}  # simple name -> files that call it
    for ff in program.files:
        for fn in ff.functions.values():
            for n in iter_nodes(fn.body):
                if isinstance(n, CallSite) and n.names:
                    called.setdefault(n.names[0].rsplit(".", 1)[-1], set()).add(ff.path)
    only = program.options.get("evaluate_only")  # files given to a pre-commit run
    # context files are summarised for callers, not evaluated rank by rank; a file without a
    # communication of its own has no entry to evaluate
    todo = [ff for ff in program.files if (only is None or ff.path in only) and communicates(ff)]
    jobs = int(program.options.get("jobs") or 1)
    all_files = getattr(program, "all_files", program.files)
    if jobs > 1 and len(todo) >= PARALLEL_FROM and "fork" in mp.get_all_start_methods():
        results = _evaluate_parallel(program, todo, sizes, called, jobs, all_files)
    else:

        def communicating(site) -> bool:
            return _communicates(program, site)

        index = ModuleIndex(all_files, communicating)
        results = [_evaluate(ff, program.table, sizes, communicating, called, index) for ff in todo]
    for ff, got in zip(todo, results, strict=True):
        if got is not None:
            out[ff.path] = got
    program._perrank = out
    return out


PARALLEL_FROM = 8  # files to evaluate before a pool pays for itself
# what a forked worker inherits: (files, table, sizes, answers, called)
_FORKED: tuple | None = None


def _evaluate(ff, table, sizes, communicating, called, index=None) -> FileVerdict | None:
    def elsewhere(name: str, here: str = ff.path) -> bool:
        return bool(called.get(name, set()) - {here})

    got = evaluate_file(ff, table, sizes, communicating, elsewhere, index)
    if got is None:
        return None
    fe, runs = got
    v = FileVerdict(fe, runs)
    v.findings = _judge(fe, runs)
    return v


@dataclass
class _Evaluated:
    """What a file's verdict keeps of its evaluation when it ran in a worker process."""

    path: str
    short: str
    function_spans: list[tuple[int, int]]


def _evaluate_child(i: int) -> FileVerdict | None:
    assert _FORKED is not None
    files, table, sizes, answers, called, index = _FORKED
    v = _evaluate(files[i], table, sizes, lambda site: answers.get(id(site), False), called, index)
    if v is not None:  # the evaluator (its syntax tree) stays here
        v.fe = _Evaluated(v.fe.path, v.fe.short, v.fe.function_spans)  # type: ignore[assignment]
    return v


def _evaluate_parallel(
    program, todo, sizes, called, jobs: int, all_files
) -> list[FileVerdict | None]:
    """Files evaluated in forked workers: what the project says of each call site (whether it
    communicates) is decided here first, and the workers inherit it with the facts (a fork
    shares the objects, so a site is known by its id)."""
    global _FORKED
    answers = {
        id(n): _communicates(program, n)
        for ff in program.files  # the followed files' sites too
        for fn in ff.functions.values()
        for n in iter_nodes(fn.body)
        if isinstance(n, CallSite | ModuleCall)
    }

    def communicating(site) -> bool:
        return answers.get(id(site), False)

    index = ModuleIndex(all_files, communicating)
    _FORKED = (todo, program.table, sizes, answers, called, index)

    try:
        ctx = mp.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            # the largest files first, so that no worker is left with one at the end
            order = sorted(range(len(todo)), key=lambda i: -_size(todo[i]))
            futures = {i: pool.submit(_evaluate_child, i) for i in order}
            return [futures[i].result() for i in range(len(todo))]
    except (BrokenProcessPool, OSError, pickle.PicklingError):
        return [_evaluate(ff, program.table, sizes, communicating, called, index) for ff in todo]
    finally:
        _FORKED = None


def _size(ff) -> int:
    try:
        return os.path.getsize(ff.path)
    except OSError:
        return 0


def _communicates(program: Program, site) -> bool:
    if isinstance(site, ModuleCall):
        return program.wrapper_of(site.refs) is not None  # a wrapped module's forward
    callee = program.resolve(site)
    return callee is not None and bool(program.summary(callee))


def _pos(fe: FileEval, line: int) -> Pos:
    lines = fe.source.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    col = len(text) - len(text.lstrip()) + 1
    return Pos(line, col, line, max(col + 1, len(text.rstrip()) + 1), line)


def _judge(fe: FileEval, runs: list[WorldRun]) -> list[RawFinding]:
    from commlint.graph import check_trace

    out: list[RawFinding] = []
    seen: set[tuple[str, int]] = set()
    reported: set[tuple[str, str]] = set()
    clean_at: dict[str, list[int]] = {}  # entry -> the world sizes it ran clean at
    for line in sorted(fe.set_loops):
        out.append(
            RawFinding(
                "CL118",
                f"the loop at line {line} iterates a set of strings and issues collectives in "
                "its body: string hashing is randomised per process (PYTHONHASHSEED), so each "
                "rank visits the items in its own order and the ranks' collectives pair "
                "different items (wrong results, or a hang when their sizes differ)",
                fe.path,
                _pos(fe, line),
                "Iterate in one order on every rank: `for name in sorted(names):`.",
            )
        )
        seen.add(("CL118", line))
    for run in runs:
        if run.steering is not None and not run.refute_only:
            found = _steering_finding(fe, run)
            if (found.code, found.pos.line) not in seen:
                seen.add((found.code, found.pos.line))
                out.append(found)
        if not run.complete:
            continue
        if run.local_splits and not run.refute_only and ("CL116", run.local_splits) not in seen:
            seen.add(("CL116", run.local_splits))
            reported.add(("CL116", run.entry))
            out.append(_local_splits_finding(fe, run))
        if run.creation_mismatch is not None and run.refute_only:
            run.issues += 1  # a mismatch, not reported from here: it refutes nothing
            continue
        if run.creation_mismatch is not None:
            line, views = run.creation_mismatch
            if ("CL117", line) not in seen:
                seen.add(("CL117", line))
                shown = ", ".join(
                    f"rank {r} passes {list(m)}" for r, m in sorted(views.items())[:4]
                )
                out.append(
                    RawFinding(
                        "CL117",
                        f"with {run.world} ranks, `new_group` at line {line}{_via(fe, line)} "
                        "is called with a "
                        f"list that depends on the rank ({shown}): every rank must pass the "
                        "same members to the same `new_group` call, or the creation hangs or "
                        "builds groups whose members disagree",
                        fe.path,
                        _pos(fe, line),
                        "Create every group on every rank with the same list, in a loop over "
                        "all groups, and keep the one this rank belongs to "
                        "(`for ranks in all_groups: g = dist.new_group(ranks); "
                        "if rank in ranks: mine = g`).",
                    )
                )
            continue
        if run.creation_missing is not None:
            run.issues += 1  # a hang: it refutes nothing
            line, callers, missing = run.creation_missing
            if not run.refute_only and ("CL115", line) not in seen:
                seen.add(("CL115", line))
                reported.add(("CL115", run.entry))
                out.append(
                    RawFinding(
                        "CL115",
                        f"with {run.world} ranks (evaluated rank by rank from `{run.entry}`): "
                        f"{_ranks(callers)} create a group with new_group at line {line}"
                        f"{_via(fe, line)}, "
                        f"{_ranks(missing)} never do: new_group waits for every rank of the "
                        f"default group, so {_ranks(callers)} hang there",
                        fe.path,
                        _pos(fe, line),
                        "Create every group on every rank, in the same order (even on ranks "
                        "that are not its members), or pass use_local_synchronization=True "
                        "when only the members create it.",
                    )
                )
            continue
        if run.trace is None:
            continue
        if run.entry != "__main__" and _one_way(run):
            # a helper that only sends (or only receives), like `send_forward`: its peer's
            # side lives in another helper, which its callers pair with it
            run.complete = False
            continue
        try:
            result = check_trace(run.trace, "gloo", path=None, reorder=False, symmetry=False)
        except Exception:  # a trace we built wrong must not stop the other rules: not judged
            run.complete = False
            continue
        run.issues = sum(1 for f in result.findings if f.code != "CL206")
        if run.refute_only:
            continue  # evaluated to refute taint findings inside it, never to report
        if len(clean_at.get(run.entry, ())) >= 2:
            # the file does not say its world size, and it runs clean at two smaller ones:
            # a toy size that only a larger world divides unevenly (a sequence of 12 over 8
            # ranks) says nothing of the worlds the program is written for
            continue
        if run.issues == 0 and run.complete and run.steering is None and not fe.declared:
            # (a loop of unknown length taken as one iteration compared across ranks is still
            # a judgement: the runs agreed with it)
            clean_at.setdefault(run.entry, []).append(run.world)
        codes_here: set[str] = {_consequence(result.findings)} - {""}
        for f in result.findings:
            if f.code in HANG:
                code = "CL115"
            elif f.code in MISMATCH:
                code = "CL116"
            else:
                continue
            local = _local_sites(run, fe.short, f)
            lines = [ln for ln, _via in local]
            if not lines or code in codes_here or (code, run.entry) in reported:
                continue  # one root cause per kind and entry: the smallest world size shows it
            codes_here.add(code)
            line = lines[0]
            if (code, line) in seen or ("CL115", line) in seen or ("CL116", line) in seen:
                continue
            seen.add((code, line))
            reported.add((code, run.entry))
            related = [
                (fe.path, _pos(fe, ln), "another rank's side of this communication")
                for ln in dict.fromkeys(lines[1:])
                if ln != line
            ][:3]
            via = local[0][1]
            out.append(
                RawFinding(
                    code,
                    f"with {run.world} ranks (evaluated rank by rank from `{run.entry}`): "
                    f"{f.message}{via}",
                    fe.path,
                    _pos(fe, line),
                    f.fix or "Make every rank issue the same communication in the same order.",
                    related,
                )
            )
    return out


def _consequence(findings: list) -> str:
    """Of a hang and a mismatch in one trace, the kind that follows from the other ("" when
    the trace has not both): the ranks part at the earlier one, and what the checker pairs
    after it (by sequence number) is an artefact of ranks already out of step. A mismatch
    first: the hang follows from it (CL115 is the consequence); a hang first (rank 0 alone
    enters an all_reduce, then both sync gradients of different sizes): CL116 is."""
    hangs = [_first_action(f) for f in findings if f.code in HANG]
    mismatches = [_first_action(f) for f in findings if f.code in MISMATCH]
    if not mismatches:
        return ""
    if hangs and min(hangs) < min(mismatches):
        return "CL116"
    return "CL115"


def _first_action(finding) -> float:
    """The earliest action index a checker finding names (on any rank)."""
    return min((a.action for a in finding.actions if a.action is not None), default=float("inf"))


def _local_splits_finding(fe: FileEval, run: WorldRun) -> RawFinding:
    line = run.local_splits or 0
    return RawFinding(
        "CL116",
        f"with {run.world} ranks (evaluated rank by rank from `{run.entry}`): the "
        f"all_to_all_single at line {line} takes its output_split_sizes from this rank's own "
        "data (different on each rank, received from no peer): what a rank expects from "
        "rank j is not what rank j sends it — gloo fails on the size, NCCL hangs or corrupts",
        fe.path,
        _pos(fe, line),
        "Exchange the counts first (`all_to_all_single(recv_counts, send_counts)`) and take "
        "output_split_sizes from what the peers sent.",
    )


def _local_sites(run: WorldRun, short: str, finding) -> list[tuple[int, str]]:
    """The lines of the evaluated file that a checker finding's actions come from, in order,
    each with the call chain that led into another file (empty when the action is here): an
    action in a followed helper is reported at the call this file makes, where the condition
    that decides it is."""
    stacks: dict[str, list[str]] = {}
    for actions in run.trace.ranks.values():
        for a in actions:
            if a.site and a.site not in stacks:
                stacks[a.site] = list(a.stack or [])
    out: list[tuple[int, str]] = []
    for name, ln in iter_sites(finding):
        if name == short:
            out.append((ln, ""))
            continue
        frames = stacks.get(f"{name}:{ln}", [])  # innermost first: "file:line in callee"
        chain: list[str] = []
        for frame in frames:
            where, _, callee = frame.partition(" in ")
            chain.append(callee)
            fname, _, fline = where.rpartition(":")
            if fname == short and fline.isdigit():
                path = " → ".join(f"`{c}`" for c in reversed(chain))
                out.append((int(fline), f" (reached from {short}:{fline} through {path})"))
                break
    return out


EXITS = {
    "break": "leaves the loop (`break` at line {exit})",
    "continue": "skips the rest of the iteration (`continue` at line {exit})",
    "return": "returns early (`return` at line {exit})",
    "if": "takes one arm of the `if`, whose arms communicate differently",
    "while": "goes round the `while` loop, which communicates, once more or not",
}


def _steering_finding(fe: FileEval, run: WorldRun) -> RawFinding:
    """A test of a rank-local value that decides what the ranks communicate (CL102, or CL103
    when it decides an early exit)."""
    st = run.steering
    assert st is not None
    where = st.where if st.where is not None else fe  # the file the test is in
    a, b = st.pair
    if st.origin is not None:
        line = st.origin[0]
        # a line of the evaluated file, or `file.py:line` of a followed one
        at = (
            line
            if isinstance(line, str)
            else f"line {line}"
            if where is fe
            else f"{fe.short}:{line}"
        )
    if st.origin is not None and st.origin[1]:
        _line, va, vb = st.origin
        why = f"at {at} the value is {va} on rank {a} and {vb} on rank {b}"
    elif st.origin is not None:
        why = f"they part at {at}"
    else:
        why = "the rank flows into it"
    groups = len(set(st.ranks.values()))
    code = "CL103" if st.kind in ("break", "continue", "return") else "CL102"
    return RawFinding(
        code,
        f"with {run.world} ranks (evaluated rank by rank from `{run.entry}`): `{st.text}` at "
        f"line {st.cond_line} tests a rank-local value — computed from each rank's own data, "
        f"whose ingredients differ between ranks ({why}; {groups} different values over "
        f"{len(st.ranks)} ranks) and that no collective over every rank agrees on first — and "
        f"decides whether the rank {EXITS[st.kind].format(exit=st.exit_line)}: the first time "
        "the ranks' values fall on different sides of the test, some ranks wait in a "
        "collective the others never call (a hang, or a mismatch)",
        where.path,
        _pos(where, st.cond_line),
        "Agree on the decision first: all-reduce the value (or a stop flag, op=MAX) over every "
        "rank, or broadcast it from one rank, and test the agreed value.",
        [(where.path, _pos(where, st.exit_line), "the exit it decides")]
        if st.exit_line != st.cond_line
        else [],
    )


def _via(fe: FileEval, line: int) -> str:
    """` (in groups.py:14)` when the new_group of `line` is in a file it calls."""
    via = getattr(fe, "creation_via", {}).get(line)
    return f" (in {via})" if via else ""


def _ranks(rs: tuple[int, ...]) -> str:
    """`rank 0`, `ranks 1-3`, `ranks 0, 2` (the checker's own rank lists)."""
    from commlint.graph.verdict import format_ranks  # (loaded with the checker, when judged)

    return f"rank{'s' if len(rs) > 1 else ''} {format_ranks(list(rs))}"


def _one_way(run: WorldRun) -> bool:
    ops = {a.op for actions in run.trace.ranks.values() for a in actions}
    sends, recvs = ops & {"send", "isend"}, ops & {"recv", "irecv"}
    return bool(sends) != bool(recvs)


def perrank_findings(program: Program, code: str) -> list[RawFinding]:
    """This rule's per-rank findings, less those a taint rule already reports (one finding
    per root cause: the taint rules' messages name the condition)."""
    mine = [f for v in verdicts(program).values() for f in v.findings if f.code == code]
    if not mine:
        return mine
    taken = _taint_lines(program)
    out = []
    for f in mine:
        lines = {f.pos.line, *(p.line for _path, p, _m in f.related)}
        spans = _spans(program, f.path, lines)
        if any(lo <= ln <= hi for path, ln in taken if path == f.path for lo, hi in spans):
            continue  # a taint finding in the same function names the condition: one cause
        out.append(f)
    return out


def _spans(program: Program, path: str, lines: set[int]) -> list[tuple[int, int]]:
    """The line spans of the innermost functions holding `lines` (the line itself, if none)."""
    v = (program._perrank or {}).get(path)
    spans: list[tuple[int, int]] = []
    for ln in lines:
        best = (ln, ln)
        if v is not None:
            for lo, hi in v.fe.function_spans:
                if lo <= ln <= hi and (best == (ln, ln) or hi - lo < best[1] - best[0]):
                    best = (lo, hi)
        spans.append(best)
    return spans


def _taint_lines(program: Program) -> set[tuple[str, int]]:
    memo = program._taint_lines
    if memo is not None:
        return memo
    from commlint.rules import all_rules

    found = list(branch_findings(program))
    rules = all_rules()
    for code in ("CL109", "CL110"):
        rule = rules.get(code)
        if rule is not None and rule.check is not None:
            found.extend(rule.check(program))
    taken = {
        (f.path, line)
        for f in found
        if f.code in TAINT_CODES
        for line in (f.pos.line, *(p.line for _path, p, _m in f.related))
    }
    program._taint_lines = taken
    return taken


def branch_findings(program: Program) -> list[RawFinding]:
    """The taint rules' findings on rank-dependent branches (CL101-CL103, CL108), less those
    the per-rank evaluation refutes: it decides what the taint rules could only suspect."""
    if program._branch_findings is not None:
        return program._branch_findings
    from commlint.lint.branches import suspected_branch_findings

    out = suspected_branch_findings(program)
    if out:
        out = [f for f in out if not proved_false(program, f)]
    program._branch_findings = out
    return out


def proved_false(program: Program, f: RawFinding) -> bool:
    """A taint finding that the per-rank evaluation refutes: its file was evaluated rank by
    rank at the world sizes it declares, every rank ran to its end, the checker found nothing
    and the flagged line ran; or its condition took one value on every rank."""
    v = verdicts(program).get(f.path)
    if v is None:
        return False
    if f.payload:
        # Data tensors' dtypes and sizes are not evaluated per rank; but when no group call
        # at the converting arm's line has a member that takes the other arm (the group has
        # one member there, or all its members convert alike), the buffers never meet.
        return _payload_never_meets(v, f.pos.line)
    if f.code == "CL102" and f.related:
        cond_line = f.related[0][1].line
        if v.decided_uniformly(cond_line):
            return True
    # CL101 "the loop runs a number of times that differs between ranks": every rank ran it
    # equally often (`[...] if rank == 0 else [...]`, lists of one length)
    same_file = bool(f.related) and f.related[0][0] == f.path
    if f.code == "CL101" and same_file and v.iterated_uniformly(f.related[0][1].line):
        return True
    if f.code == "CL101" and _members_call_alike(v, f.pos.line):
        return True
    if any(g.code not in ("CL118",) for g in v.findings):
        return False
    by_entry: dict[str, list[WorldRun]] = {}
    for r in v.runs:
        by_entry.setdefault(r.entry, []).append(r)
    for runs in by_entry.values():
        if all(r.complete and r.exact and not r.issues for r in runs) and any(
            f.pos.line in r.executed for r in runs
        ):
            return True
    return False


def called_outside_subgroups(program: Program, path: str, line: int) -> bool:
    """A rank that belongs to none of the subgroups the program creates calls the collective
    at `path:line` on WORLD, in a run every rank finished: the call cannot have been meant for a
    subgroup (that rank has none; with `group=` it would fail there)."""
    v = verdicts(program).get(path)
    if v is None:
        return False
    site = f"{v.fe.short}:{line}"
    for run in v.runs:
        trace = run.trace
        if not run.complete or trace is None:
            continue
        subgroups = [
            set(m) for name, m in trace.groups.items() if name != "WORLD" and len(m) < run.world
        ]
        if not subgroups:
            continue
        for rank, actions in trace.ranks.items():
            if any(rank in g for g in subgroups):
                continue
            if any(a.site == site and (a.group or "WORLD") == "WORLD" for a in actions):
                return True
    return False


def _complete_runs(v) -> list:
    """The evaluated runs when every one is complete, exact and has a trace (else none)."""
    runs = list(v.runs)
    if not runs or not all(r.complete and r.exact and r.trace is not None for r in runs):
        return []
    return runs


def _calls_at(trace, line: int, short: str | None = None) -> dict[str, dict[int, int]]:
    """group -> {rank: how many calls it makes} at `line` (of the file `short`, if given)."""
    out: dict[str, dict[int, int]] = {}
    for rank, actions in trace.ranks.items():
        for a in actions:
            if not a.site:
                continue
            where, _, at = a.site.rpartition(":")
            if at == str(line) and (short is None or where == short):
                per = out.setdefault(a.group or "WORLD", {})
                per[rank] = per.get(rank, 0) + 1
    return out


def _members(trace, group: str) -> list[int]:
    return trace.groups.get(group) or list(range(trace.world_size))


def _payload_never_meets(v, line: int) -> bool:
    """Every evaluated run is complete and exact, the line ran, and each of its calls is on a
    group whose other members all call at that same line too."""
    runs = _complete_runs(v)
    if not runs or not any(line in r.executed for r in runs):
        return False
    return all(
        set(_members(r.trace, group)) <= set(per)
        for r in runs
        for group, per in _calls_at(r.trace, line).items()
    )


def _members_call_alike(v, line: int) -> bool:
    """CL101 says the ranks that take the other arm skip the call at `line` and wait elsewhere
    on its group. False when every evaluated run is complete and exact, the line ran, and
    each group called there is called there equally often by every one of its members: the
    ranks that skip it are not members (`if rank in ranks: ...(group=g)`). What else is wrong
    with that call (a root outside the group) is the per-rank rules' to report."""
    ran = False
    for r in _complete_runs(v):
        for group, per in _calls_at(r.trace, line, v.fe.short).items():
            ran = True
            if {per.get(m, 0) for m in _members(r.trace, group)} != {max(per.values())}:
                return False
    return ran
