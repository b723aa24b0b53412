"""CL115: evaluated with concrete ranks, the program hangs (a cycle, or a partner that never
comes)."""

from commlint.rules import Rule


def check(program):
    from commlint.lint.perrank_check import perrank_findings  # loads the checker: only when run

    return perrank_findings(program, "CL115")


RULE = Rule(
    code="CL115",
    name="per-rank-hang",
    summary=("Evaluated rank by rank, some ranks wait forever for a partner that never comes."),
    explanation="""
The linter runs each rank's communication with the rank and the world size concrete (world
sizes from `[tool.commlint] world-sizes`, default 2, 4 and 8, or the sizes the file itself
declares: `--nproc-per-node 4`, `mp.spawn(..., nprocs=4)`, `init_device_mesh(..., (2, 2))`):
rank arithmetic is folded, loops with known bounds are unrolled, peers are computed, branches
are decided per rank, groups built in loops get their members, and helpers and methods of
classes defined in the file are followed. The per-rank trace goes through the same checker as
`commlint run` and `commlint plan`. This rule reports what hangs there: two ranks that both
send first (guarded pipeline exchanges, halo exchanges), a stage that receives one message
more than its peer sends (1F1B), a collective some ranks issue more often than others (a
metrics helper called on the main process only), an `isend`/`irecv` with no partner, ranks
stranded in a collective after another rank raised, and a `new_group` that only some ranks
call (without `use_local_synchronization=True` it waits for every rank of the default group).
Where a value is not known to the linter (data, an opaque call that communicates), the world
size is not evaluated and the taint rules (CL101-CL103) decide; a finding they already make is
not repeated here.
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Order each pair of ranks so that one side sends while the other receives (even ranks send
first, odd ranks receive first, or `dist.batch_isend_irecv`), make every rank issue the same
number of collectives (pad shards to equal length), and call the collectives of helpers on
every rank.
""",
    invalid=(
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    x = torch.zeros(4)
    y = torch.zeros(4)
    if rank < world - 1:
        dist.send(x, rank + 1)  # expect: CL115
    if rank > 0:
        dist.send(y, rank - 1)
    if rank > 0:
        dist.recv(x, rank - 1)
    if rank < world - 1:
        dist.recv(y, rank + 1)
""",
        """
import torch
import torch.distributed as dist


def one_f_one_b(microbatches=4):
    rank = dist.get_rank()
    world = dist.get_world_size()
    first, last = rank == 0, rank == world - 1
    act = torch.zeros(16)
    grad = torch.zeros(16)
    for mb in range(microbatches):
        if not first:
            dist.recv(act, rank - 1)
        if not last:
            dist.send(act, rank + 1)
        if last:
            dist.send(grad, rank - 1)
            dist.recv(act, rank - 1)  # expect: CL115
        if not last:
            dist.recv(grad, rank + 1)
        if not first:
            dist.send(grad, rank - 1)
""",
        """
import torch
import torch.distributed as dist


def exchange_halo(left, right, rank, world):
    if rank > 0:
        dist.send(left, rank - 1)
        dist.recv(left, rank - 1)
    if rank < world - 1:
        dist.send(right, rank + 1)  # expect: CL115
        dist.recv(right, rank + 1)


def step():
    rank, world = dist.get_rank(), dist.get_world_size()
    u = torch.zeros(64)
    exchange_halo(u[:1], u[-1:], rank, world)
""",
        """
import torch
import torch.distributed as dist


class Metrics:
    def __init__(self):
        self.total = torch.zeros(1)

    def reduce_mean(self):
        dist.all_reduce(self.total)  # expect: CL115
        return self.total / dist.get_world_size()

    def log_epoch(self):
        print(self.reduce_mean())


def is_main_process():
    return dist.get_rank() == 0


def train():
    stats = Metrics()
    for epoch in range(2):
        if is_main_process():
            stats.log_epoch()
        dist.barrier()
""",
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    t = torch.zeros(4)
    if rank == 0:
        req = dist.isend(t, 1, tag=1)
    else:
        req = dist.irecv(t, 0, tag=0)
    req.wait()  # expect: CL115
""",
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    grad = torch.zeros(8)
    for step in range(3):
        if rank == 1 and step == 1:
            raise RuntimeError("bad batch")
        dist.all_reduce(grad)  # expect: CL115
""",
    ),
    valid=(
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    x = torch.zeros(4)
    y = torch.zeros(4)
    if rank > 0:
        dist.recv(x, rank - 1)
    if rank < world - 1:
        dist.send(x, rank + 1)
        dist.recv(y, rank + 1)
    if rank > 0:
        dist.send(y, rank - 1)
""",
        """
import torch
import torch.distributed as dist


def one_f_one_b(microbatches=4):
    rank = dist.get_rank()
    world = dist.get_world_size()
    first, last = rank == 0, rank == world - 1
    act = torch.zeros(16)
    grad = torch.zeros(16)
    for mb in range(microbatches):
        if not first:
            dist.recv(act, rank - 1)
        if not last:
            dist.send(act, rank + 1)
            dist.recv(grad, rank + 1)
        if not first:
            dist.send(grad, rank - 1)
""",
        """
import torch
import torch.distributed as dist


def exchange_halo(left, right, rank, world):
    # even ranks send first, odd ranks receive first: every pair has one sender
    if rank % 2 == 0:
        if rank < world - 1:
            dist.send(right, rank + 1)
            dist.recv(right, rank + 1)
        if rank > 0:
            dist.send(left, rank - 1)
            dist.recv(left, rank - 1)
    else:
        dist.recv(left, rank - 1)
        dist.send(left, rank - 1)
        if rank < world - 1:
            dist.recv(right, rank + 1)
            dist.send(right, rank + 1)


def step():
    rank, world = dist.get_rank(), dist.get_world_size()
    u = torch.zeros(64)
    exchange_halo(u[:1], u[-1:], rank, world)
""",
        """
import torch
import torch.distributed as dist


class Metrics:
    def __init__(self):
        self.total = torch.zeros(1)

    def reduce_mean(self):
        dist.all_reduce(self.total)
        return self.total / dist.get_world_size()


def is_main_process():
    return dist.get_rank() == 0


def train():
    stats = Metrics()
    for epoch in range(2):
        mean = stats.reduce_mean()
        if is_main_process():
            print(mean)
        dist.barrier()
""",
    ),
)
