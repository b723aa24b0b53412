"""CL116: evaluated with concrete ranks, a communication's members disagree on its payload or
root."""

from commlint.rules import Rule


def check(program):
    from commlint.lint.perrank_check import perrank_findings  # loads the checker: only when run

    return perrank_findings(program, "CL116")


RULE = Rule(
    code="CL116",
    name="per-rank-mismatch",
    summary=(
        "Evaluated rank by rank, the members of a communication disagree on dtype, size, "
        "splits or root."
    ),
    explanation="""
With the rank and the world size concrete (see CL115), the linter knows the dtype and the shape
of the buffers each rank passes, the all_to_all split lists, the root and the group's members.
A collective whose members pass different dtypes or sizes (a dtype chosen in a rank branch, a
float16 broadcast source with float32 receivers, all_gather buffers sized from the local shard),
all_to_all split lists that are not each other's transposes, a receive buffer sized from the raw
length while the sender pads, or a root that is not a member of the group (`src=0` on a group
built in a loop that is `[2, 3]` on ranks 2 and 3): gloo fails, NCCL hangs or silently mixes
data.
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Pass the same dtype and size on every member (convert before the call, size receive buffers
from what the sender sends, pad shards to a common length), give all_to_all the transposed
split lists, and name the root by its global rank inside the group
(`src=dist.get_global_rank(group, 0)` or `group_src=0`).
""",
    invalid=(
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    if rank % 2 == 1:
        dtype = torch.float32
    else:
        dtype = torch.bfloat16
    buf = torch.zeros(1024, dtype=dtype)
    dist.all_reduce(buf)  # expect: CL116
""",
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    send_splits = [rank + 1] * world
    recv_splits = [rank + 1] * world
    inp = torch.zeros(sum(send_splits))
    out = torch.zeros(sum(recv_splits))
    dist.all_to_all_single(out, inp, recv_splits, send_splits)  # expect: CL116
""",
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    if rank == 0:
        weights = torch.randn(256).half()
    else:
        weights = torch.empty(256)
    dist.broadcast(weights, src=0)  # expect: CL116
""",
        """
import torch
import torch.distributed as dist

RAW = 1000


def main():
    rank = dist.get_rank()
    if rank == 0:
        padded = (RAW + 127) // 128 * 128
        data = torch.zeros(padded)
        dist.send(data, 1)  # expect: CL116
    elif rank == 1:
        data = torch.empty(RAW)
        dist.recv(data, 0)
""",
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    tp_group = None
    for start in range(0, world, 2):
        ranks = list(range(start, start + 2))
        g = dist.new_group(ranks)
        if rank in ranks:
            tp_group = g
    t = torch.zeros(4)
    dist.broadcast(t, src=0, group=tp_group)  # expect: CL116
""",
        """
import torch
import torch.distributed as dist

ITEMS = list(range(10))


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    local = torch.zeros(len(ITEMS[rank::3]))
    out = [torch.zeros(len(ITEMS[0::3])) for _ in range(world)]
    dist.all_gather(out, local)  # expect: CL116
""",
    ),
    valid=(
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    if rank % 2 == 1:
        buf = torch.zeros(1024, dtype=torch.float32)
    else:
        buf = torch.zeros(1024, dtype=torch.bfloat16).float()
    dist.all_reduce(buf)
""",
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    send_splits = [rank + 1] * world
    recv_splits = [peer + 1 for peer in range(world)]
    inp = torch.zeros(sum(send_splits))
    out = torch.zeros(sum(recv_splits))
    dist.all_to_all_single(out, inp, recv_splits, send_splits)
""",
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    tp_group = None
    tp_leader = 0
    for start in range(0, world, 2):
        ranks = list(range(start, start + 2))
        g = dist.new_group(ranks)
        if rank in ranks:
            tp_group = g
            tp_leader = start
    t = torch.zeros(4)
    dist.broadcast(t, src=tp_leader, group=tp_group)
""",
    ),
)
