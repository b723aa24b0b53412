"""Potential deadlocks under reordering (CL209): orders a run could take but the trace did not.

A trace is one interleaving. Within a *window* of a rank — the actions between two fences
(`wait`, `sync`, a blocking call of the main thread that is not a bucket op) — the issue order
of two kinds of ops is decided at run time, not by the program text:

- **ready-triggered ops**: ops with a `bucket` (DDP's fused all-reduces and ops issued from
  gradient hooks) are issued when gradients become ready;
- **ops of different threads** (`thread`) interleave freely.

Which of those orders can hang depends on the queue model: under `gloo` only a blocking call
orders ops of different groups (and only on its own thread), under `nccl` any blocking call
or sync does (the compute stream is shared), under `single-queue` every op does.

Never reordered: ops on one communicator (that would change which ops match), ops of one
bucket, a thread's program order between non-bucket ops, and anything across a fence.

The search is a conflict graph, never an enumeration of permutations: nodes are matched
communications (instances), an edge x → y means "some rank cannot start y before x
completes". Fixed edges hold in every legal reordering; a *free* edge is a choice one rank
may make for a pair of unordered ops on different communicators. A deadlock in any legal
reordering is a cycle of that reordering's edges, all of which lie in the union graph, so a
free edge outside every strongly connected component of the union graph can never take part
in a deadlock: only SCCs with a free edge are searched (docs/nondeterminism.md proves it).
In each, a shortest cycle through a free edge gives per-rank orders; if they are consistent
the rank's window is re-linearised, the reordered trace is checked by the ordinary checker,
and only a CL201 deadlock there is reported — so every finding carries a checkable witness.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import pairwise

from commlint.findings import Finding, Location
from commlint.graph.compile import compile_trace
from commlint.trace import COLLECTIVE_OPS, P2P_OPS, Action, Trace

CODE = "CL209"
NAME = "potential-deadlock"

#: What makes a rank wait, under each queue model, for an op on another group.
MODEL_REASONS = {
    "gloo": "async ops on different groups progress independently (a worker pool per group); "
    "only a blocking call orders them, and only on its own thread",
    "nccl": "one stream per group: only a blocking call (the shared compute stream waits) or a "
    "sync orders ops of different groups (DFCCL's synchronisation model)",
    "single-queue": "the device runs one communication at a time, in issue order (NCCL out of "
    "resources; DFCCL's single-queue model)",
}


@dataclass
class Unit:
    """One reorderable item of a window: an action, or a whole batch of p2p actions."""

    actions: list[int]  # action indices, consecutive in the trace
    insts: list[int]  # matched communications of those actions
    comms: frozenset  # communicators (NCCL-style) the unit uses
    blocking: bool
    bucket: int | None
    thread: str | None


@dataclass
class Window:
    rank: int
    units: list[Unit]
    issue_pred: list[int] = field(default_factory=list)  # bitsets: units forced before unit v


@dataclass
class Witness:
    """A legal reordering: new action order per (rank, window), and what it triggers."""

    model: str
    orders: dict[tuple[int, int], list[int]]  # (rank, 1-based window) -> unit order
    trace: Trace
    deadlock: Finding


def _comm(a: Action, rank: int) -> tuple:
    if a.op in P2P_OPS:
        lo, hi = sorted((rank, a.peer))
        return ("p2p", a.group, lo, hi)
    return ("coll", a.group)


def _is_blocking(a: Action) -> bool:
    if a.op in COLLECTIVE_OPS:
        return not (bool(a.is_async) or (a.handle is not None and a.is_async is None))
    return a.op in ("send", "recv")


def split_windows(trace: Trace, inst_of: dict[tuple[int, int], int]) -> dict[int, list]:
    """Per rank: a list of items, each a `Window` or a fence `("wait", insts)`/`("sync",)`."""
    return {rank: _rank_windows(rank, acts, inst_of) for rank, acts in trace.ranks.items()}


def _rank_windows(rank: int, actions: list[Action], inst_of: dict[tuple[int, int], int]) -> list:
    items: list = []
    units: list[Unit] = []
    handle_inst: dict[str, int] = {}
    i, n = 0, len(actions)
    while i < n:
        a = actions[i]
        if a.op in ("wait", "sync"):
            if units:
                items.append(Window(rank, units))
                units = []
            if a.op == "sync":
                items.append(("sync",))
            else:
                items.append(
                    ("wait", [handle_inst[h] for h in a.handles or () if h in handle_inst])
                )
            i += 1
            continue
        j = i + 1
        if a.batch is not None:
            while j < n and actions[j].batch == a.batch and actions[j].op in P2P_OPS:
                j += 1
        idx = [k for k in range(i, j) if (rank, k) in inst_of]
        i = j
        if not idx:
            continue  # skipped by torch (non-member): no communication
        acts = [actions[k] for k in idx]
        for k, b in zip(idx, acts, strict=True):
            if b.handle is not None:
                handle_inst[b.handle] = inst_of[(rank, k)]
        unit = Unit(
            idx,
            [inst_of[(rank, k)] for k in idx],
            frozenset(_comm(b, rank) for b in acts),
            any(_is_blocking(b) for b in acts),
            a.bucket,
            a.thread,
        )
        if unit.blocking and unit.bucket is None and unit.thread is None:
            # a blocking call of the main thread is a fence: its own window, then it returns
            if units:
                items.append(Window(rank, units))
                units = []
            items.append(Window(rank, [unit]))
            items.append(("wait", unit.insts))
        else:
            units.append(unit)
    if units:
        items.append(Window(rank, units))
    return items


def _closures(w: Window) -> None:
    """Bitsets of the units forced before each unit (transitively closed)."""
    last_comm: dict = {}
    last_bucket: dict[int, int] = {}
    last_plain: dict = {}  # thread -> last non-bucket unit
    pending_bucket: dict = {}  # thread -> bucket units since its last non-bucket unit
    issue: list[int] = []
    for v, u in enumerate(w.units):
        preds: set[int] = set()
        for c in u.comms:
            if c in last_comm:
                preds.add(last_comm[c])
            last_comm[c] = v
        if u.bucket is not None:
            if u.bucket in last_bucket:
                preds.add(last_bucket[u.bucket])
            last_bucket[u.bucket] = v
            if u.thread in last_plain:
                preds.add(last_plain[u.thread])
            pending_bucket.setdefault(u.thread, []).append(v)
        else:
            if u.thread in last_plain:
                preds.add(last_plain[u.thread])
            preds.update(pending_bucket.pop(u.thread, ()))
            last_plain[u.thread] = v
        bits = 0
        for p in preds:
            bits |= issue[p] | (1 << p)
        issue.append(bits)
    w.issue_pred = issue


def _forced(w: Window, u: int, v: int) -> bool:
    """Must unit u be issued before unit v in every legal order?"""
    return bool(w.issue_pred[v] >> u & 1)


def _can_block(w: Window, model: str, x: int, y: int) -> bool:
    """Can a legal order make y wait for x within the window (x first, y held by it)?"""
    ux, uy = w.units[x], w.units[y]
    if ux.comms & uy.comms:
        return False  # same communicator: order fixed, matching unchanged
    if _forced(w, y, x):
        return False
    if model == "single-queue":
        return True
    if not ux.blocking:
        return False
    return model == "nccl" or ux.thread == uy.thread


def _fixed_block(w: Window, model: str, x: int, y: int) -> bool:
    """Does y wait for x in every legal order?"""
    if not _forced(w, x, y):
        return False
    if model == "single-queue":
        return True
    ux, uy = w.units[x], w.units[y]
    if model == "nccl" and ux.comms & uy.comms:
        return True
    return ux.blocking and (model == "nccl" or ux.thread == uy.thread)


class _Graph:
    """Conflict graph: instances, per-rank gates, per-window hubs; edges as flat arrays."""

    def __init__(self, n_inst: int) -> None:
        self.n = n_inst
        self.src: list[int] = []
        self.dst: list[int] = []
        self.hubs: set[int] = set()

    def node(self) -> int:
        self.n += 1
        return self.n - 1

    def edge(self, a: int, b: int) -> None:
        self.src.append(a)
        self.dst.append(b)


def _build(items: dict[int, list], model: str, n_inst: int) -> tuple[_Graph, list[Window]]:
    """The graph of fixed edges, plus (with hubs) every free choice through one hub per window.

    Returns the graph and the windows with two or more units (their closures computed)."""
    g = _Graph(n_inst)
    multi: list[Window] = []
    for seq in items.values():
        gate = -1
        last_comm: dict = {}
        prev_exit = -1
        since_sync: list[int] = []
        pending_block: list[int] = []  # blocking units of the last window: the next gate waits
        for item in seq:
            if isinstance(item, Window):
                w = item
                if pending_block:  # the window before ended in a blocking call, not a fence
                    new_gate = g.node()
                    if gate != -1:
                        g.edge(gate, new_gate)
                    for x in pending_block:
                        g.edge(x, new_gate)
                    gate, pending_block = new_gate, []
                exit_node = g.node() if model == "single-queue" else -1
                if prev_exit != -1:
                    g.edge(prev_exit, exit_node)
                for u in w.units:
                    for x in u.insts:
                        if gate != -1:
                            g.edge(gate, x)
                        if prev_exit != -1:
                            g.edge(prev_exit, x)
                        if exit_node != -1:
                            g.edge(x, exit_node)
                        if model == "nccl":
                            for c in u.comms:
                                if c in last_comm and last_comm[c] != x:
                                    g.edge(last_comm[c], x)
                        since_sync.append(x)
                    if model == "nccl":
                        for c in u.comms:
                            last_comm[c] = u.insts[-1]
                    if u.blocking:
                        pending_block.extend(u.insts)
                if exit_node != -1:
                    prev_exit = exit_node
                if len(w.units) > 1:
                    if not w.issue_pred:
                        _closures(w)
                    if _has_free_pair(w, model):
                        _hub(g, w, model)
                        multi.append(w)
                    else:
                        _fixed_edges(g, w, model)
                continue
            kind = item[0]
            new_gate = g.node()
            if gate != -1:
                g.edge(gate, new_gate)
            # a sync waits for everything outstanding, except on gloo (a CPU no-op)
            synced = since_sync if model != "gloo" else []
            waited = item[1] if kind == "wait" else synced
            for x in (*waited, *pending_block):
                g.edge(x, new_gate)
            if kind == "sync":
                since_sync = []
            pending_block = []
            gate = new_gate
    return g, multi


def _has_free_pair(w: Window, model: str) -> bool:
    """Can some legal order of this window make one op wait for another it did not?"""
    if all(u.bucket is None and u.thread is None for u in w.units):
        return False  # one thread, program order: nothing to choose
    n = len(w.units)
    return any(_can_block(w, model, x, y) for x in range(n) for y in range(n) if x != y)


def _fixed_edges(g: _Graph, w: Window, model: str) -> None:
    """The waits inside a window whose order is fixed (no hub needed)."""
    n = len(w.units)
    for x in range(n):
        if model != "single-queue" and not w.units[x].blocking:
            continue
        for y in range(x + 1, n):
            if _fixed_block(w, model, x, y):
                for a in w.units[x].insts:
                    for b in w.units[y].insts:
                        g.edge(a, b)
                if model == "single-queue":
                    break  # the window is a chain: the next unit carries the rest


def _hub(g: _Graph, w: Window, model: str) -> None:
    by_thread = model == "gloo"
    hubs: dict = {}
    for u in w.units:
        key = u.thread if by_thread else None
        if key not in hubs:
            hubs[key] = g.node()
            g.hubs.add(hubs[key])
        h = hubs[key]
        for x in u.insts:
            g.edge(h, x)
            if model == "single-queue" or u.blocking:
                g.edge(x, h)


def _sccs(g: _Graph) -> list[int]:
    """Strongly connected component of every node (iterative Tarjan over CSR arrays).

    Plain lists, not networkx: the graph has a node per matched communication (millions on
    big plans)."""
    n = g.n
    start = [0] * (n + 1)
    for a in g.src:
        start[a + 1] += 1
    for i in range(n):
        start[i + 1] += start[i]
    fill = start[:-1].copy()
    nbr = [0] * len(g.src)
    for a, b in zip(g.src, g.dst, strict=True):
        nbr[fill[a]] = b
        fill[a] += 1
    index = [-1] * n
    low = [0] * n
    label = [-1] * n
    on_stack = [False] * n
    stack: list[int] = []
    counter = comps = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, start[root])]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, k = work[-1]
            end = start[v + 1]
            while k < end:
                w = nbr[k]
                k += 1
                if index[w] == -1:
                    work[-1] = (v, k)
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, start[w]))
                    break
                if on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
            else:
                work.pop()
                if work and low[v] < low[work[-1][0]]:
                    low[work[-1][0]] = low[v]
                if low[v] == index[v]:
                    while True:
                        w = stack.pop()
                        on_stack[w] = False
                        label[w] = comps
                        if w == v:
                            break
                    comps += 1
    return label


def _in_scc_free_pair(w: Window, model: str, labels: list[int]) -> bool:
    """Does the window hold a free pair whose two instances share a strongly connected component?"""
    comps: dict[int, set[int]] = {}
    for v, u in enumerate(w.units):
        for x in u.insts:
            comps.setdefault(labels[x], set()).add(v)
    for vs in comps.values():
        if len(vs) > 1 and any(_can_block(w, model, x, y) for x in vs for y in vs if x != y):
            return True
    return False


@dataclass
class _Explicit:
    adj: dict[int, list[int]]
    fixed: set[tuple[int, int]]
    # edge -> every (rank, window, x, y) that may choose it: x before y in that window
    free: dict[tuple[int, int], list[tuple[int, int, int, int]]]


def _explicit(
    g: _Graph,
    multi: list[Window],
    items: dict[int, list],
    model: str,
    labels: list[int],
    keep: set[int],
) -> _Explicit:
    """The fixed edges inside kept components (an edge between components is on no cycle),
    and the real free pairs there in place of the hubs."""
    ex = _Explicit({}, set(), {})
    hubs = g.hubs
    for a, b in zip(g.src, g.dst, strict=True):
        la = labels[a]
        if la == labels[b] and la in keep and a not in hubs and b not in hubs:
            ex.adj.setdefault(a, []).append(b)
    wid_of: dict[int, int] = {}
    for seq in items.values():
        k = 0
        for it in seq:
            if isinstance(it, Window):
                k += 1
                wid_of[id(it)] = k
    for w in multi:
        by_comp: dict[int, set[int]] = {}
        for v, u in enumerate(w.units):
            for x in u.insts:
                if labels[x] in keep:
                    by_comp.setdefault(labels[x], set()).add(v)
        # a pair whose instances sit in different components is on no cycle
        pairs = {(x, y) for vs in by_comp.values() if len(vs) > 1 for x in vs for y in vs if x != y}
        for x, y in sorted(pairs):
            fixed = _fixed_block(w, model, x, y)
            if not fixed and not _can_block(w, model, x, y):
                continue
            for a in w.units[x].insts:
                for b in w.units[y].insts:
                    if a == b:
                        continue
                    ex.adj.setdefault(a, []).append(b)
                    if fixed:
                        ex.fixed.add((a, b))
                    else:
                        ex.free.setdefault((a, b), []).append((w.rank, wid_of[id(w)], x, y))
    for e in ex.fixed:
        ex.free.pop(e, None)
    return ex


def _shortest_path(
    adj: dict[int, list[int]], start: int, goal: int, labels: list[int], banned: set
) -> list[int] | None:
    """BFS inside the strongly connected component of `goal` (every cycle stays in one)."""
    comp = labels[goal]
    prev = {start: -1}
    q = deque([start])
    while q:
        a = q.popleft()
        if a == goal:
            path = []
            while a != -1:
                path.append(a)
                a = prev[a]
            return path[::-1]
        for b in adj.get(a, ()):
            if b not in prev and labels[b] == comp and (a, b) not in banned:
                prev[b] = a
                q.append(b)
    return None


def _linearise(w: Window, extra: list[tuple[int, int]]) -> list[int] | None:
    """A legal order of the window's units with the extra `u before v` pairs, or None.

    Ties go to the earliest recorded unit, so only what the witness needs moves."""
    n = len(w.units)
    before = list(w.issue_pred)
    for u, v in extra:
        before[v] |= 1 << u
    order: list[int] = []
    placed = 0
    while len(order) < n:
        for v in range(n):
            if not placed >> v & 1 and before[v] & ~placed == 0:
                order.append(v)
                placed |= 1 << v
                break
        else:
            return None  # the choices contradict the window's fixed order
    return order


def reorder_trace(
    trace: Trace,
    orders: dict[tuple[int, int], list[int]],
    windows: dict[int, list[Window]] | None = None,
) -> Trace:
    """The trace with window `wid` (1-based) of `rank` put in unit order `orders[rank, wid]`."""
    windows = windows or _windows_of(trace)
    ranks = {r: list(acts) for r, acts in trace.ranks.items()}
    for (rank, wid), order in orders.items():
        w = windows[rank][wid - 1]
        slots = sorted(k for u in w.units for k in u.actions)
        new = [trace.ranks[rank][k] for v in order for k in w.units[v].actions]
        for slot, a in zip(slots, new, strict=True):
            ranks[rank][slot] = a
    return trace.model_copy(update={"ranks": ranks})


def _instances(trace: Trace) -> tuple[dict[tuple[int, int], int], int]:
    cg = compile_trace(trace, "gloo")  # matching does not depend on the model
    inst_of = {(r, i): x for r, i, x in zip(cg.op_rank, cg.op_action, cg.op_inst, strict=True)}
    return inst_of, len(cg.inst_need)


def _windows_of(trace: Trace) -> dict[int, list[Window]]:
    inst_of, _ = _instances(trace)
    return {
        r: [it for it in seq if isinstance(it, Window)]
        for r, seq in split_windows(trace, inst_of).items()
    }


def _cycle_tags(ex: _Explicit, seed: tuple, path: list[int]) -> list[tuple[tuple, list]]:
    """For each choice on the cycle (seed first): its edge and the (rank, window, x, y) that
    can make it."""
    out: list[tuple[tuple, list]] = [((path[-1], path[0]), [seed])]
    for e in pairwise(path):
        if e in ex.free and e not in ex.fixed:
            out.append((e, ex.free[e]))
    return out


def _choose(
    windows: dict[int, list[Window]], options: list[tuple[tuple, list]]
) -> tuple[dict[tuple[int, int], list[int]] | None, tuple | None]:
    """Pick one rank per choice so every window stays linearisable: the orders, or None and
    the first edge no rank can take."""
    pairs: dict[tuple[int, int], list[tuple[int, int]]] = {}
    orders: dict[tuple[int, int], list[int]] = {}
    for edge, opts in options:
        for rank, wid, x, y in opts:
            key = (rank, wid)
            trial = [*pairs.get(key, []), (x, y)]
            order = _linearise(windows[rank][wid - 1], trial)
            if order is not None:
                pairs[key] = trial
                orders[key] = order
                break
        else:
            return None, edge
    return orders, None


def has_floating_ops(trace: Trace) -> bool:
    """Does any op carry a `bucket` or a `thread`? Without one, every window is in program
    order on every rank and no reordering exists (one linear scan, no compile)."""
    rows_of = getattr(trace.ranks, "compact_rows", None)
    for rank in trace.ranks:
        if rows_of is not None and rows_of(rank) is not None:
            continue  # compact rows (`CompactRow`) carry neither
        acts = trace.ranks[rank]
        distinct = dict(zip(map(id, acts), acts, strict=True))  # repeated objects: once each
        if any(a.bucket is not None or a.thread is not None for a in distinct.values()):
            return True
    return False


@dataclass
class _Prepared:
    inst_of: dict[tuple[int, int], int]
    n_inst: int
    items: dict[int, list]


def _prepare(trace: Trace) -> _Prepared:
    inst_of, n_inst = _instances(trace)
    return _Prepared(inst_of, n_inst, split_windows(trace, inst_of))


def find_witnesses(
    trace: Trace,
    model: str,
    limit: int = 4,
    attempts: int = 64,
    prepared: _Prepared | None = None,
    checks: int = 8,
    hints: list[dict[tuple[int, int], list[int]]] = (),
) -> list[Witness]:
    """Legal reorderings of `trace` that deadlock under `model`, each confirmed by the checker.

    `hints`: reorderings that deadlock under a weaker model, tried first — every wait of gloo
    is a wait of nccl, and every wait of nccl one of single-queue, so a cycle survives.
    Cost: one linear pass to build the union graph and one SCC pass; the quadratic
    pair work and the BFS only run inside components that hold a free pair."""
    from commlint.graph.recorded import check_recorded

    if not has_floating_ops(trace):
        return []
    prep = prepared or _prepare(trace)
    n_inst, items = prep.n_inst, prep.items
    windows = {r: [it for it in seq if isinstance(it, Window)] for r, seq in items.items()}
    hinted: list[Witness] = []
    for orders in hints:
        if len(hinted) >= limit or checks <= 0:
            break
        checks -= 1
        witness = reorder_trace(trace, orders, windows)
        res = check_recorded(witness, model)
        dl = next((f for f in res.findings if f.code == "CL201"), None)
        if dl is not None:
            hinted.append(Witness(model, orders, witness, dl))
    if hinted:
        return hinted
    g, multi = _build(items, model, n_inst)
    if not multi:
        return []
    labels = _sccs(g)
    cands = [w for w in multi if _in_scc_free_pair(w, model, labels)]
    if not cands:
        return []
    keep = {labels[x] for w in cands for u in w.units for x in u.insts}
    ex = _explicit(g, multi, items, model, labels, keep)
    found: list[Witness] = []
    seen: set = set()
    deadlocked: set[frozenset] = set()
    for (a, b), tags in ex.free.items():
        if len(found) >= limit or attempts <= 0:
            break
        if labels[a] != labels[b]:
            continue
        for tag in tags:
            orders = None
            banned: set = set()
            for _ in range(4):  # a shortest cycle may need contradictory choices: route around
                attempts -= 1
                path = _shortest_path(ex.adj, b, a, labels, banned)
                if path is None:
                    break
                orders, bad = _choose(windows, _cycle_tags(ex, tag, path))
                if orders is not None or bad == (a, b):
                    break
                banned.add(bad)
            if orders is None:
                continue
            orders = {k: v for k, v in orders.items() if v != sorted(v)}
            sig = tuple(sorted((k, tuple(v)) for k, v in orders.items()))
            if sig in seen:
                continue
            seen.add(sig)
            if checks <= 0:
                return found
            checks -= 1  # each confirmation is one run of the ordinary checker
            witness = reorder_trace(trace, orders, windows)
            res = check_recorded(witness, model)
            dl = next((f for f in res.findings if f.code == "CL201"), None)
            if dl is None:
                continue
            ranks = frozenset(e.rank for e in dl.cycle or ())
            if ranks not in deadlocked:
                deadlocked.add(ranks)
                found.append(Witness(model, orders, witness, dl))
            break
    return found


def _act(trace: Trace, rank: int, k: int) -> str:
    a = trace.ranks[rank][k]
    site = f" @{a.site}" if a.site else ""
    why = []
    if a.bucket is not None:
        why.append(f"bucket {a.bucket}")
    if a.thread is not None:
        why.append(f"thread {a.thread}")
    return f"{a.describe()}{site}" + (f" [{', '.join(why)}]" if why else "")


def _source_of(trace: Trace, rank: int, acts: list[int]) -> str:
    a = [trace.ranks[rank][k] for k in acts]
    if any(x.bucket is not None for x in a):
        return "both are issued when gradients become ready"
    if len({x.thread for x in a}) > 1:
        return "different threads issue them"
    return "their order is not fixed by the program"


def _moves(w: Witness, trace: Trace, windows: dict[int, list[Window]]) -> list[str]:
    """One clause per reordered window: what rank r does instead of what was recorded."""
    out = []
    for (rank, wid), order in sorted(w.orders.items()):
        win = windows[rank][wid - 1]
        pos = {v: k for k, v in enumerate(order)}
        pairs = [
            (y, x) for x in range(len(order)) for y in range(x + 1, len(order)) if pos[y] < pos[x]
        ]
        if not pairs:
            continue
        y, x = pairs[0]
        first, second = win.units[y].actions[0], win.units[x].actions[0]
        more = f" (and {len(pairs) - 1} more swaps)" if len(pairs) > 1 else ""
        out.append(
            f"rank {rank} runs {_act(trace, rank, first)} before {_act(trace, rank, second)}"
            f"{more} — recorded the other way, but {_source_of(trace, rank, [first, second])}"
        )
    return out


def _moved_actions(w: Witness, windows: dict[int, list[Window]]) -> list[tuple[int, int, int]]:
    """(rank, action, slot it takes in the witness) of every action the witness moves."""
    out = []
    for (rank, wid), order in sorted(w.orders.items()):
        win = windows[rank][wid - 1]
        slots = sorted(k for u in win.units for k in u.actions)
        new = [k for v in order for k in win.units[v].actions]
        out.extend((rank, k, slot) for slot, k in zip(slots, new, strict=True) if k != slot)
    return sorted(out)


def potential_deadlocks(
    trace: Trace,
    models: list[str],
    outcomes: dict,
    path: str | None = None,
    lines=None,
    limit: int = 2,
) -> list[Finding]:
    """CL209 findings for the models under which the recorded order runs to completion.

    `outcomes` is `TraceCheck.outcomes` of the ordinary check: a model under which a rank is
    already blocked or failed is not searched (its CL201/CL202 come first)."""
    verdicts: dict[str, str] = {}
    per_model: dict[str, list[Witness]] = {}
    floating = has_floating_ops(trace)
    prepared = None
    hints: list[dict] = []
    strength = {"gloo": 0, "nccl": 1, "single-queue": 2}
    for m in sorted(models, key=lambda m: strength.get(m, 3)):  # weaker models' witnesses help
        outs = outcomes.get(m, {})
        if any(o.status != "finished" for o in outs.values()):
            verdicts[m] = "hangs or fails in the recorded order already"
            continue
        if floating and prepared is None:
            prepared = _prepare(trace)
        ws = find_witnesses(trace, m, limit, prepared=prepared, hints=hints) if floating else []
        hints = [w.orders for w in ws] or hints
        per_model[m] = ws
        verdicts[m] = "may deadlock under reordering" if ws else "no legal reordering deadlocks"
    if not any(per_model.values()):
        return []
    items = prepared.items if prepared is not None else _prepare(trace).items
    windows = {r: [it for it in seq if isinstance(it, Window)] for r, seq in items.items()}
    merged: dict[tuple, Finding] = {}
    orders: dict[tuple, list[tuple[int, list[int]]]] = {}
    for m, ws in per_model.items():
        for w in ws:
            moves = _moves(w, trace, windows)
            key = (tuple(moves), tuple(e.rank for e in w.deadlock.cycle or ()))
            if key in merged:
                merged[key].models.append(m)
            else:
                merged[key] = _finding(trace, w, moves, _moved_actions(w, windows), path, lines)
                orders[key] = witness_orders(w, windows)
    findings = []
    for key, f in merged.items():
        f.message += " " + _model_line(f.models, [m for m in models if m not in f.models], verdicts)
        f.related = [Location(message=f"{m}: {verdicts[m]} — {MODEL_REASONS[m]}") for m in models]
        f.related += [
            Location(rank=r, message=f"witness: rank {r} issues actions {order} in this order")
            for r, order in orders[key]
        ]
        findings.append(f)
    return findings


def witness_orders(w: Witness, windows: dict[int, list[Window]]) -> list[tuple[int, list[int]]]:
    """Per reordered window: the rank and its action indices in the witness's order (the
    slots they fill are the same indices, sorted)."""
    out = []
    for (rank, wid), order in sorted(w.orders.items()):
        win = windows[rank][wid - 1]
        out.append((rank, [k for v in order for k in win.units[v].actions]))
    return out


def _model_line(bad: list[str], others: list[str], verdicts: dict[str, str]) -> str:
    """The one-line answer to "why here and not there"."""
    ok = [m for m in others if verdicts.get(m) == "no legal reordering deadlocks"]
    if not ok:
        return f"Possible under {', '.join(bad)}."
    parts = "; ".join(f"under {m}, {MODEL_REASONS[m]}" for m in (*bad, *ok))
    return f"Possible under {', '.join(bad)}, not under {', '.join(ok)}: {parts}."


def _finding(
    trace: Trace,
    w: Witness,
    moves: list[str],
    moved: list[tuple[int, int, int]],
    path: str | None,
    lines,
) -> Finding:
    dl = w.deadlock
    locs = []
    for rank, k, slot in moved:
        line = lines.action_line(rank, k) if lines else None
        a = trace.ranks[rank][k]
        when = "earlier" if slot < k else "later"
        message = f"issued {when} in the witness (as action {slot})"
        locs.append(
            Location(path=path, line=line, rank=rank, action=k, site=a.site, message=message)
        )
    first = next((loc for loc in locs if loc.line is not None), None)
    cycle = dl.message.split(" — deadlock")[0]
    message = (
        "The recorded order completes, but another legal order deadlocks: "
        + "; ".join(moves)
        + f". Then {cycle} — deadlock."
    )
    return Finding(
        code=CODE,
        name=NAME,
        severity="warning",
        message=message,
        path=path,
        line=first.line if first else None,
        col=1 if first else None,
        ranks=sorted({e.rank for e in dl.cycle or ()} | {r for r, _, _ in moved}),
        cycle=dl.cycle,
        actions=locs,
        fix=_fix(trace, moved),
        models=[w.model],
    )


def _fix(trace: Trace, moved: list[tuple[int, int, int]]) -> str:
    acts = [trace.ranks[r][k] for r, k, _ in moved]
    if any(a.bucket is not None for a in acts):
        return (
            "Do not issue a collective on another group from a gradient hook while DDP buckets "
            "are in flight: issue it after backward (after DDP's buckets completed), or from a "
            "DDP comm hook, so every rank issues it at the same point of the bucket sequence."
        )
    if len({a.thread for a in acts}) > 1 or any(a.thread is not None for a in acts):
        return (
            "Issue collectives from one thread, or make the threads take turns (a lock held "
            "from issue to wait) so every rank issues them in the same order."
        )
    return "Issue these collectives in one fixed order on every rank, whatever the timing."


__all__ = [
    "MODEL_REASONS",
    "find_witnesses",
    "potential_deadlocks",
    "reorder_trace",
]
