"""Verdict: wait-for graph of the ranks that cannot move, its cycles, and the findings.

Each blocked rank gets edges to the ranks whose counterpart its blocked op is missing. A cycle
among blocked ranks is a deadlock; an edge to a rank that finished, raised or exited is a hang
with no cycle (orphaned wait / stranded peer). networkx runs on this graph only: one node per
rank, never the execution graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice

from commlint.findings import CycleEdge, Finding, Location
from commlint.graph.compile import BLOCK, SYNC, WAIT, Graph
from commlint.graph.simulate import State
from commlint.rules import rule_of
from commlint.trace import SEND_OPS, TORCH_ISSUED, Action, Trace


@dataclass
class RankOutcome:
    """What a rank does under a model: `finished`, `blocked` at an action, or `failed` there."""

    status: str
    action: int | None = None


_FINISHED = RankOutcome("finished")


@dataclass
class Blocked:
    """Why one blocked rank cannot move: its frontier action and who it waits for."""

    rank: int
    action: int
    # target rank -> (culprit op id, is it a mismatch edge)
    targets: dict[int, tuple[int, bool]] = field(default_factory=dict)


def format_ranks(ranks: list[int] | set[int]) -> str:
    """`[0, 1, 2, 5]` → `0-2, 5`."""
    rs = sorted(set(ranks))
    out: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(
            str(rs[i]) if j == i else (f"{rs[i]}, {rs[j]}" if j == i + 1 else f"{rs[i]}-{rs[j]}")
        )
        i = j + 1
    return ", ".join(out)


def _expected_ranks(g: Graph, inst: int) -> list[int]:
    key = g.inst_key[inst]
    if key[0] == "coll":
        return g.trace.group_ranks(key[1])
    return [key[2], key[3]]


def _culprits(
    g: Graph, st: State, op: int, memo: dict | None = None
) -> dict[int, tuple[int, bool]]:
    """Ranks whose missing progress keeps `op` from completing.

    `memo` caches per-instance work, so N members blocked in one collective cost O(N)."""
    while not st.started[op] and g.op_prev[op] != -1 and not st.done[g.op_prev[op]]:
        op = g.op_prev[op]  # queued behind an earlier op of the same queue
    inst = g.op_inst[op]
    mine = _action(g, op)
    key = (inst, mine.op, mine.root)
    cached = memo.get(key) if memo is not None else None
    if cached is None:
        started = {g.op_rank[m] for m in g.inst_members[inst] if st.started[m]}
        missing = [r for r in _expected_ranks(g, inst) if r not in started]
        differing = []
        if inst in g.mismatched:
            for m in g.inst_members[inst]:
                other = _action(g, m)
                if (other.op, other.root) != (mine.op, mine.root):
                    differing.append(g.op_rank[m])
        cached = (missing, differing)
        if memo is not None:
            memo[key] = cached
    missing, differing = cached
    out: dict[int, tuple[int, bool]] = dict.fromkeys(missing, (op, False))
    for r in differing:
        out.setdefault(r, (op, True))
    out.pop(g.op_rank[op], None)
    return out


def _action(g: Graph, op: int) -> Action:
    return g.trace.ranks[g.op_rank[op]][g.op_action[op]]


def blocked_ranks(g: Graph, st: State) -> list[Blocked]:
    out = []
    memo: dict = {}
    for r, prog in g.steps.items():
        i = st.pc[r]
        if i >= len(prog) or r in st.failed:
            continue
        b = Blocked(r, i)
        # a rank of several threads waits for what each of its stuck threads waits for
        for j in st.lanes.get(r, (i,)):
            for op in _blocking_ops(g, st, r, prog[j]):
                for t, why in _culprits(g, st, op, memo).items():
                    b.targets.setdefault(t, why)
        out.append(b)
    return out


def _blocking_ops(g: Graph, st: State, r: int, step: int) -> list[int]:
    """The ops a rank's step waits for."""
    kind, arg = step & 7, step >> 3
    if kind == BLOCK:
        return [arg]
    if kind == WAIT:
        return [o for o in g.waits[arg] if not st.done[o]][:1]
    assert kind == SYNC
    ops = [o for o in range(len(g.op_rank)) if g.op_rank[o] == r and st.issued[o]]
    return [o for o in ops if not st.done[o]]


def outcomes(g: Graph, st: State) -> dict[int, RankOutcome]:
    # one shared `finished` for the ranks that did nothing: a world of a million idle ranks
    # costs a dict, not a million objects
    res = dict.fromkeys(range(g.trace.world_size), _FINISHED)
    for r, prog in g.steps.items():
        if r in st.failed:
            res[r] = RankOutcome("failed", st.failed[r])
        elif st.pc.get(r, 0) < len(prog):
            res[r] = RankOutcome("blocked", st.pc[r])
    return res


@dataclass
class Verdict:
    findings: list[Finding]
    outcomes: dict[int, RankOutcome]


class _Ctx:
    def __init__(self, g: Graph, path: str | None, lines) -> None:
        self.g, self.trace, self.path, self.lines = g, g.trace, path, lines

    def loc(self, rank: int, i: int, message: str | None = None) -> Location:
        a = self.trace.ranks[rank][i]
        line = self.lines.action_line(rank, i) if self.lines else None
        return Location(
            path=self.path, line=line, rank=rank, action=i, site=a.site, message=message
        )

    def ref(self, rank: int, i: int) -> str:
        a = self.trace.ranks[rank][i]
        via = f" (via {a.via})" if a.via else ""
        return f"{a.describe()}{' @' + a.site if a.site else ''}{via}"

    def finding(self, code: str, severity: str, message: str, refs, fix: str = "", **kw) -> Finding:
        locs = [self.loc(r, i) for r, i in refs]
        first = next((loc for loc in locs if loc.line is not None), None)
        return Finding(
            code=code,
            name=rule_of(code).name,
            severity=severity,
            message=message,
            path=self.path,
            line=first.line if first else None,
            col=1 if first else None,
            ranks=sorted({r for r, _ in refs}),
            actions=locs,
            fix=fix or None,
            **kw,
        )


def _cycle_fix(trace: Trace, edges: list[CycleEdge]) -> str:
    acts = [trace.ranks[e.rank][e.action] for e in edges]
    ops = {a.op for a in acts}
    if ops <= {"send"}:
        return (
            "Every rank in the cycle sends before it receives, and a blocking send waits for "
            "its receive. Order them by parity (even ranks send first, odd ranks receive "
            "first), or post both with isend/irecv (batch_isend_irecv) and wait for both."
        )
    if ops <= {"recv", "wait"} and all(a.op == "recv" for a in acts if a.op != "wait"):
        return "Every rank in the cycle receives first: let one side send before it receives."
    groups = {a.group for a in acts}
    if all(a.op not in ("send", "recv", "isend", "irecv", "wait") for a in acts):
        if len(groups) > 1:
            return (
                "The ranks wait in collectives on different groups "
                f"({', '.join(sorted(groups))}) issued in different orders: issue collectives "
                "on these groups in one fixed order on every rank."
            )
        return (
            "The ranks wait in different collectives of one group: make every member issue "
            "the same sequence of collectives (none skipped or added under a rank condition)."
        )
    return (
        "Make every rank issue these communications in one consistent order: a rank must not "
        "wait in a collective or blocking call while a peer still needs a send/recv from it."
    )


def _edge(ctx: _Ctx, b: Blocked, target: int) -> CycleEdge:
    a = ctx.trace.ranks[b.rank][b.action]
    return CycleEdge(
        rank=b.rank,
        action=b.action,
        op=a.describe(),
        group=a.group if a.op not in ("wait", "sync") else None,
        site=a.site,
        waits_for=target,
    )


def _upstream(preds: dict[int, list[int]], nodes: list[int]) -> set[int]:
    """Every rank that waits, directly or through others, on one of `nodes`."""
    seen = set(nodes)
    stack = list(nodes)
    while stack:
        for p in preds.get(stack.pop(), ()):
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def _has_cycle(succ: dict[int, list[int]]) -> bool:
    """Does the graph hold a cycle through two or more ranks? (Kahn's peeling: cheap, and a
    blocked rank with no such cycle — waiting for a rank that finished — needs no networkx.)"""
    indeg = dict.fromkeys(succ, 0)
    for u, out in succ.items():
        for v in out:
            if v != u:
                indeg[v] += 1
    free = [u for u, d in indeg.items() if d == 0]
    peeled = 0
    while free:
        u = free.pop()
        peeled += 1
        for v in succ[u]:
            if v != u:
                indeg[v] -= 1
                if indeg[v] == 0:
                    free.append(v)
    return peeled < len(succ)


def _cycles(succ: dict[int, list[int]], limit: int) -> tuple[list[list[int]], bool]:
    """Elementary cycles, smallest first, at most `limit`; and whether more exist."""
    import networkx as nx  # only a wait-for graph with a cycle pays for it

    wfg = nx.DiGraph()
    wfg.add_nodes_from(succ)
    wfg.add_edges_from((u, v) for u, out in succ.items() for v in out)
    found: list[list[int]] = []
    for scc in nx.strongly_connected_components(wfg):
        if len(scc) < 2:
            continue
        sub = wfg.subgraph(scc).copy()  # a view is several times slower to search
        if all(d == 1 for _, d in sub.out_degree()):  # one ring: the SCC is the cycle
            found.append([u for u, _ in nx.find_cycle(sub)])
            continue
        # Short cycles first (cheap, bounded search), then longer ones from Johnson's
        # algorithm; both stop early, so a star or clique of thousands of cycles costs little.
        cap = limit * 4
        short = list(islice(nx.simple_cycles(sub, length_bound=3), cap))
        found.extend(short)
        if len(short) < cap:
            longer = (c for c in nx.simple_cycles(sub) if len(c) > 3)
            found.extend(islice(longer, cap - len(short)))
    found.sort(key=lambda c: (len(c), sorted(c)))
    canon = []
    for c in found:
        k = c.index(min(c))
        canon.append(c[k:] + c[:k])
    return canon[:limit], len(canon) > limit


def verdict(
    g: Graph, st: State, path: str | None = None, lines=None, max_cycles: int = 32
) -> Verdict:
    ctx = _Ctx(g, path, lines)
    trace = g.trace
    findings: list[Finding] = []
    outs = outcomes(g, st)
    blocked = {b.rank: b for b in blocked_ranks(g, st)}
    if not blocked:  # every rank finished: no wait-for graph to search
        findings.extend(
            ctx.finding(p.code, p.severity, p.message, p.refs, p.fix) for p in g.problems
        )
        findings.extend(_leftovers(ctx, st, outs))
        return Verdict(findings, outs)
    # the wait-for graph: blocked rank -> rank it waits for -> {op, mismatch}
    wfg: dict[int, dict[int, dict]] = {r: {} for r in blocked}
    stranded: dict[tuple, list[Blocked]] = {}
    for b in blocked.values():
        for t, (op, mismatch) in b.targets.items():
            if t in blocked:
                wfg[b.rank][t] = {"op": op, "mismatch": mismatch}
            else:
                stranded.setdefault((g.op_inst[op], t), []).append(b)
    preds: dict[int, list[int]] = {}
    for u, out in wfg.items():
        for v in out:
            preds.setdefault(v, []).append(u)

    # A collective whose members disagree hangs them all; CL203 says so once. Its edges stay
    # out of the cycle search, which would otherwise list every pair of those members.
    plain = {u: [v for v, d in out.items() if not d["mismatch"]] for u, out in wfg.items()}
    cycles, more = _cycles(plain, max_cycles) if _has_cycle(plain) else ([], False)
    for c in cycles:
        edges = [_edge(ctx, blocked[r], c[(k + 1) % len(c)]) for k, r in enumerate(c)]
        data = [wfg[r][c[(k + 1) % len(c)]] for k, r in enumerate(c)]
        insts = {g.op_inst[d["op"]] for d in data}
        if all(d["mismatch"] for d in data) and len(insts) == 1:
            continue  # the collective mismatch (CL203) already says it
        parts = []
        shown = set(range(len(edges))) if len(edges) <= 8 else {*range(5), len(edges) - 1}
        for k, e in enumerate(edges):
            if k not in shown:
                if k == 5:
                    parts.append(f"… ({len(edges) - 6} more ranks wait the same way) …")
                continue
            who = f"rank {e.rank}" if k == 0 or k - 1 not in shown else "which"
            parts.append(f"{who} waits in {ctx.ref(e.rank, e.action)} for rank {e.waits_for}")
            culprit = data[k]["op"]
            if g.op_rank[culprit] == e.rank and g.op_action[culprit] != e.action:
                parts[-1] += f" (its {ctx.ref(e.rank, g.op_action[culprit])} is not matched)"
        behind = _upstream(preds, c) - set(c)
        tail = f" Also stuck behind it: ranks {format_ranks(behind)}." if behind else ""
        findings.append(
            ctx.finding(
                "CL201",
                "error",
                ", ".join(parts) + f" — deadlock.{tail}",
                [(e.rank, e.action) for e in edges],
                _cycle_fix(trace, edges),
                cycle=edges,
            )
        )
    if more and findings and findings[-1].code == "CL201":
        findings[
            -1
        ].message += f" More than {max_cycles} elementary cycles exist; the smallest are shown."

    for (_, target), waiters in stranded.items():
        findings.append(_stranded(ctx, st, target, waiters))

    for p in g.problems:
        findings.append(ctx.finding(p.code, p.severity, p.message, p.refs, p.fix))
    findings.extend(_leftovers(ctx, st, outs))
    return Verdict(findings, outs)


def _stranded(ctx: _Ctx, st: State, target: int, waiters: list[Blocked]) -> Finding:
    trace = ctx.trace
    end = trace.ends.get(target)
    ranks = [b.rank for b in waiters]
    b0 = waiters[0]
    who = f"rank {b0.rank}" if len(waiters) == 1 else f"ranks {format_ranks(ranks)}"
    verb = "waits" if len(waiters) == 1 else "wait"
    what = ctx.ref(b0.rank, b0.action)
    if target in st.failed:
        code = "CL210"
        why = f"rank {target} raised in {ctx.ref(target, st.failed[target])}"
        fix = (
            "Fix the error on that rank; catch it and abort the whole job rather than leave "
            "peers waiting."
        )
    elif end is not None and end.kind in ("exception", "exit"):
        code = "CL210"
        detail = f": {end.message}" if end.message else ""
        at = f" at {end.site}" if end.site else ""
        why = f"rank {target} {'raised' if end.kind == 'exception' else 'exited'}{at}{detail}"
        fix = (
            "Make the failure reach every rank (catch, then all-reduce an error flag or "
            "abort the process group)."
        )
    elif end is not None and end.kind == "timeout":
        code = "CL202"
        why = f"rank {target} had not got there when the recording time limit stopped it"
        if end.message:
            why += f" ({end.message})"
        fix = (
            "Look for a loop on that rank whose exit condition differs across ranks; if that "
            "rank was only slow (real compute), record again with a longer --timeout."
        )
    else:
        code = "CL202"
        n = len(trace.ranks.get(target, []))
        why = (
            f"rank {target} finished its {n} action{'s' if n != 1 else ''} without issuing "
            "the counterpart"
            if n
            else f"rank {target} issues no communication at all"
        )
        fix = (
            "A rank leaves early or skips this call: make the loop bounds and exit conditions "
            "agree across ranks (e.g. all-reduce the stop flag), or issue the call on every rank."
        )
    refs = [(b.rank, b.action) for b in waiters]
    outcome = (
        "a hang unless that rank gets there later"
        if end is not None and end.kind == "timeout" and target not in st.failed
        else "hang (no cycle: nobody will ever answer)"
    )
    return ctx.finding(
        code,
        "error",
        f"{who} {verb} in {what} for rank {target}, but {why} — {outcome}.",
        refs,
        fix,
        related=[
            Location(rank=target, message=f"rank {target} ({end.kind if end else 'finished'})")
        ],
    )


def _leftovers(ctx: _Ctx, st: State, outs: dict[int, RankOutcome]) -> list[Finding]:
    g = ctx.g
    findings: list[Finding] = []
    unmatched: dict[int, list[int]] = {}
    unwaited: dict[tuple[str, str | None], list[tuple[int, int]]] = {}
    for op in range(len(g.op_rank)):
        if not g.op_async[op] or g.op_waited[op]:
            continue
        r = g.op_rank[op]
        if not st.done[op]:
            if outs[r].status == "finished":
                unmatched.setdefault(g.op_inst[op], []).append(op)
            continue
        a = _action(g, op)
        if a.label and TORCH_ISSUED in a.label:
            # torch's own code leaves it unwaited by design (DDP's Join tells the joined
            # ranks whether to sync and does not wait for the answer): nothing to fix here
            continue
        unwaited.setdefault((a.describe(), a.site), []).append((r, g.op_action[op]))
    for ops in unmatched.values():
        op = ops[0]
        r, i = g.op_rank[op], g.op_action[op]
        culprits = _culprits(ctx.g, st, op)
        missing = format_ranks(list(culprits)) if culprits else "?"
        a = _action(g, op)
        kind = "p2p" if a.op in SEND_OPS or a.op == "irecv" else "collective"
        plural = "s" if len(culprits) > 1 else ""
        verb = "posts the counterpart" if kind == "p2p" else "issue it"
        findings.append(
            ctx.finding(
                "CL207",
                "error",
                f"rank {r}'s {ctx.ref(r, i)} is never matched: "
                f"rank{plural} {missing} never {verb}. "
                "Nothing waits for it here, so the program ends with it in flight: the data is "
                "lost and NCCL hangs or aborts at shutdown.",
                [(g.op_rank[o], g.op_action[o]) for o in ops],
                "Issue the matching call on the peer, or drop this one; wait on every async "
                "handle before the step ends.",
            )
        )
    for (desc, site), refs in unwaited.items():
        ranks = format_ranks([r for r, _ in refs])
        plural = "s" if len({r for r, _ in refs}) > 1 else ""
        at = f" @{site}" if site else ""
        findings.append(
            ctx.finding(
                "CL206",
                "warning",
                f"async {desc}{at} is never waited (rank{plural} {ranks}, {len(refs)} op"
                f"{'s' if len(refs) > 1 else ''}): its buffer may be reused or read before the "
                "op completes, and under NCCL its errors surface only at the next sync.",
                refs,
                "Keep the work handle and call `.wait()` on it before using the tensor.",
            )
        )
    return findings
