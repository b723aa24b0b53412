"""Progress: run every rank forward until no rank can move (event-driven, linear).

An op *starts* when its rank issues it and the op before it on the same queue has completed
(queues: none under `gloo`, one per communicator under `nccl`, one per rank under
`single-queue`). An instance completes when all the ops it needs have started. A rank's
frontier passes an async op at once, a blocking op or a `wait` when the op completed, and a
`sync` (nccl, single-queue) when every op it issued completed.

Under gloo, a rank whose actions come from several host threads (`Action.thread`) runs one
program per thread (a *lane*, `Graph.threads`): each thread's actions in their issue order,
and a thread that blocks does not stop the others — which of two threads issued first is a
race, not an order the run can rely on. A `sync` waits for everything the rank issued,
whatever the thread.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from commlint.graph.compile import BLOCK, FAIL, ISSUE, SYNC, WAIT, Graph


@dataclass
class State:
    """Where the simulation stopped."""

    pc: dict[int, int]
    issued: list[bool]
    started: list[bool]
    done: list[bool]
    failed: dict[int, int] = field(default_factory=dict)  # rank -> action index where it raised
    # a rank of several threads that did not finish: where each unfinished thread stands
    lanes: dict[int, list[int]] = field(default_factory=dict)

    def finished(self, g: Graph, rank: int) -> bool:
        return rank not in self.failed and self.pc[rank] >= len(g.steps.get(rank, ()))


def simulate(g: Graph) -> State:
    n_ops = len(g.op_rank)
    issued = [False] * n_ops
    started = [False] * n_ops
    done = [False] * n_ops
    inst_started = [0] * len(g.inst_need)
    inst_need = g.inst_need
    inst_members = g.inst_members
    op_rank, op_inst, op_prev, op_next = g.op_rank, g.op_inst, g.op_prev, g.op_next
    op_async, op_fails = g.op_async, g.op_fails
    extra_next = g.op_next_extra
    waits = g.waits
    ranks = sorted(g.steps)
    size = max(ranks, default=-1) + 1
    # lanes: one per rank (lane id = rank), plus one per further thread of a threaded rank
    steps: list[list[int]] = [g.steps.get(r, []) for r in range(size)]
    lane_rank = list(range(size))
    lane_actions: dict[int, list[int]] = {}  # a threaded rank's lane -> its action indices
    lanes_of: dict[int, list[int]] = {}  # a threaded rank -> its lanes
    for r, parts in g.threads.items():
        ids = []
        for k, idx in enumerate(parts):
            lane = r if k == 0 else len(steps)
            if k:
                steps.append([])
                lane_rank.append(r)
            steps[lane] = [g.steps[r][j] for j in idx]
            lane_actions[lane] = idx
            ids.append(lane)
        lanes_of[r] = ids
    n_lanes = len(steps)
    pc = [0] * n_lanes  # lists indexed by lane: faster than dicts in this loop
    wait_pos = [0] * n_lanes
    outstanding = [0] * size  # indexed by rank
    waiting = [False] * size
    failed: dict[int, int] = {}  # rank -> the step of its lane where it raised
    failed_in: dict[int, int] = {}  # rank -> that lane
    ready = deque(ranks)
    ready.extend(lane for r in ranks for lane in lanes_of.get(r, ())[1:])
    to_start: list[int] = []

    while ready:
        lane = ready.popleft()
        r = lane_rank[lane]
        if failed and r in failed:
            continue  # another thread of the rank raised
        prog = steps[lane]
        n = len(prog)
        i = pc[lane]
        while i < n:
            step = prog[i]
            kind = step & 7
            if kind <= BLOCK:  # ISSUE or BLOCK
                op = step >> 3
                if not issued[op]:
                    issued[op] = True
                    if kind == ISSUE:
                        outstanding[r] += 1
                    prev = op_prev[op]
                    if prev == -1 or done[prev]:
                        # start it (inline: most starts complete nothing), then everything
                        # its completion unblocks, depth first
                        started[op] = True
                        inst = op_inst[op]
                        count = inst_started[inst] + 1
                        inst_started[inst] = count
                        while count >= inst_need[inst]:
                            for m in inst_members[inst]:
                                done[m] = True
                                mr = op_rank[m]
                                if op_async[m]:
                                    outstanding[mr] -= 1
                                if waiting[mr]:
                                    waiting[mr] = False
                                    if lanes_of and mr in lanes_of:
                                        ready.extend(lanes_of[mr])  # each looks again
                                    else:
                                        ready.append(mr)
                                nxt = op_next[m]
                                if nxt != -1:
                                    if issued[nxt] and not started[nxt]:
                                        to_start.append(nxt)
                                    for nxt in extra_next.get(m, ()):
                                        if issued[nxt] and not started[nxt]:
                                            to_start.append(nxt)
                            count = -1  # the next start on the stack that completes
                            while to_start:
                                s = to_start.pop()
                                started[s] = True
                                inst = op_inst[s]
                                inst_started[inst] += 1
                                if inst_started[inst] >= inst_need[inst]:
                                    count = inst_started[inst]
                                    break
                if kind == BLOCK:
                    if not done[op]:
                        waiting[r] = True
                        break
                    if op_fails[op]:
                        failed[r] = i
                        failed_in[r] = lane
                        break
            elif kind == WAIT:
                ops = waits[step >> 3]
                j = wait_pos[lane]
                while j < len(ops) and done[ops[j]] and not op_fails[ops[j]]:
                    j += 1
                wait_pos[lane] = j
                if j < len(ops):
                    if done[ops[j]]:  # a waited op that raises
                        failed[r] = i
                        failed_in[r] = lane
                        break
                    waiting[r] = True
                    break
                wait_pos[lane] = 0
            elif kind == SYNC:
                if outstanding[r]:
                    waiting[r] = True
                    break
            elif kind == FAIL:
                failed[r] = i
                failed_in[r] = lane
                break
            i += 1
        pc[lane] = i
    if not lanes_of:
        return State({r: pc[r] for r in ranks}, issued, started, done, failed)
    at = {r: pc[r] for r in ranks}
    stands: dict[int, list[int]] = {}
    for r, ids in lanes_of.items():
        where = [lane_actions[lane][pc[lane]] for lane in ids if pc[lane] < len(steps[lane])]
        if where:
            at[r], stands[r] = min(where), sorted(where)
        else:
            at[r] = len(g.steps[r])
    raised = {
        r: lane_actions[failed_in[r]][i] if failed_in[r] in lane_actions else i
        for r, i in failed.items()
    }
    return State(at, issued, started, done, raised, stands)
