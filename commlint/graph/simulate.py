"""Progress: run every rank forward until no rank can move (event-driven, linear).

An op *starts* when its rank issues it and the op before it on the same queue has completed
(queues: none under `gloo`, one per communicator under `nccl`, one per rank under
`single-queue`). An instance completes when all the ops it needs have started. A rank's
frontier passes an async op at once, a blocking op or a `wait` when the op completed, and a
`sync` (nccl, single-queue) when every op it issued completed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from commlint.graph.compile import BLOCK, FAIL, ISSUE, SKIP, SYNC, WAIT, Graph


@dataclass
class State:
    """Where the simulation stopped."""

    pc: dict[int, int]
    issued: list[bool]
    started: list[bool]
    done: list[bool]
    failed: dict[int, int] = field(default_factory=dict)  # rank -> action index where it raised

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
    steps = g.steps
    extra_next = g.op_next_extra
    ranks = sorted(steps)
    pc = dict.fromkeys(ranks, 0)
    wait_pos = dict.fromkeys(ranks, 0)
    outstanding = dict.fromkeys(ranks, 0)
    waiting = dict.fromkeys(ranks, False)
    failed: dict[int, int] = {}
    ready = deque(ranks)
    to_start: list[int] = []

    def drain() -> None:
        while to_start:
            op = to_start.pop()
            started[op] = True
            inst = op_inst[op]
            inst_started[inst] += 1
            if inst_started[inst] < inst_need[inst]:
                continue
            for m in inst_members[inst]:
                done[m] = True
                r = op_rank[m]
                if op_async[m]:
                    outstanding[r] -= 1
                if waiting[r]:
                    waiting[r] = False
                    ready.append(r)
                nxt = op_next[m]
                if nxt != -1:
                    if issued[nxt] and not started[nxt]:
                        to_start.append(nxt)
                    for nxt in extra_next.get(m, ()):
                        if issued[nxt] and not started[nxt]:
                            to_start.append(nxt)

    def issue(op: int) -> None:
        issued[op] = True
        if op_async[op]:
            outstanding[op_rank[op]] += 1
        prev = op_prev[op]
        if prev == -1 or done[prev]:
            to_start.append(op)
            drain()

    while ready:
        r = ready.popleft()
        prog = steps[r]
        n = len(prog)
        i = pc[r]
        while i < n:
            kind, arg = prog[i]
            if kind == ISSUE:
                if not issued[arg]:
                    issue(arg)
            elif kind == BLOCK:
                if not issued[arg]:
                    issue(arg)
                if not done[arg]:
                    waiting[r] = True
                    break
                if op_fails[arg]:
                    failed[r] = i
                    break
            elif kind == WAIT:
                ops = arg
                j = wait_pos[r]
                while j < len(ops) and done[ops[j]]:
                    if op_fails[ops[j]]:
                        break
                    j += 1
                wait_pos[r] = j
                if j < len(ops):
                    if done[ops[j]]:  # a waited op that raises
                        failed[r] = i
                        break
                    waiting[r] = True
                    break
                wait_pos[r] = 0
            elif kind == SYNC:
                if outstanding[r]:
                    waiting[r] = True
                    break
            elif kind == FAIL:
                failed[r] = i
                break
            else:
                assert kind == SKIP
            i += 1
        pc[r] = i
    return State(pc, issued, started, done, failed)
