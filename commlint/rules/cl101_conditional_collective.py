"""CL101: a collective that only some ranks call, because a branch depends on the rank."""

from commlint.lint.perrank_check import branch_findings
from commlint.rules import Rule


def check(program):
    return [f for f in branch_findings(program) if f.code == "CL101"]


RULE = Rule(
    code="CL101",
    name="conditional-collective",
    summary="A collective is called on only some ranks because a branch depends on the rank.",
    explanation="""
Every member of a process group must call the same collectives on it, in the same order. When
an `if`, `match`, conditional expression or loop bound depends on the rank (`get_rank()`,
`RANK`/`LOCAL_RANK`, `args.local_rank`, `self.rank`, `is_main_process`, Megatron's
`parallel_state` ranks, a mesh's local rank, a `@rank_zero_only` function...) and its arms lead
to different sequences of collectives on a group the condition splits, the ranks that call the
extra collective wait for the others forever (NCCL) or until the timeout (gloo).

The check is per group and PARCOACH-precise: a branch is reported only when its arms differ on
some group. Both arms calling `broadcast(src=0)` is fine; a condition on the pipeline stage
around a collective on the data-parallel group is fine (every member of that group is on the
same stage); `if rank == 0: send(...) else: recv(...)` is a matched pair, not a finding. A
condition is compared with the group's members where they are known: `if rank % 2 == 0:`
around a collective on `new_group(list(range(0, world_size, 2)))` (or `[0, 2]`, or
`[r for r in range(world_size) if r % 2 == 0]`) selects exactly the members and is fine, and
so is a parity test around a group kept from a loop of `new_group(range(first, world_size,
2))`. A condition whose value is fixed on every rank that reaches it (`if is_main_process():`
inside the odd-rank arm of `if rank % 2 == 0:`) does not split anything. Arms that issue the
same rooted collective must also agree on the root: `broadcast(t, src=1)` in one arm against
`broadcast(t, src=0)` in the other is reported, and so are arms that pass a buffer converted to
another dtype (`t.to(torch.float64)`, `t.double()`) or padded (`torch.cat([t, pad])`,
`F.pad(t, ...)`) where the other arm passes `t` itself, arms that use the same buffers in
another order (sends included), and arms that keep each group's order but interleave two
groups the condition splits in another order (a wait-for cycle across the groups). Calls into
other functions (in any file given) are followed, and the message shows the chain.
A DTensor made on one dimension of a named mesh (`distribute_tensor(w, mesh["tp"], ...)`,
`DTensor.from_local(t, mesh["tp"], ...)`) communicates in `full_tensor()` and `redistribute()`
on that dimension's groups: a test of the tp coordinate (`mesh["tp"].get_local_rank() == 0`)
around them leaves tp peers out and is reported; a test of the dp coordinate is taken alike by
every member of each tp group and is not. With the mesh's shape known, each rank's coordinates
are evaluated too (`(r // stride) % size` over the row-major layout of the world).
Hidden collectives count too: a DDP/FSDP-wrapped module's forward, `accelerator.gather` /
`wait_for_everyone` / `save_state`, DeepSpeed `engine.save_checkpoint`, Lightning
`self.log(..., sync_dist=True)` and `self.all_gather`.

A rank compared with a negative integer class attribute (`if self.rank !=
self.MAIN_PROCESS_RANK:` with `MAIN_PROCESS_RANK = -1` on torch's `MultiProcessTestCase`, the
launcher process) holds alike on every rank, also when the constant is on a base class in
another file of the project.
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Call the collective on every rank of the group (move it out of the branch) and use its result
only where needed; or make the condition identical on all ranks (decide on rank 0 and
`broadcast` the decision).
""",
    invalid=(
        """
import torch.distributed as dist

def save(model, t):
    if dist.get_rank() == 0:
        dist.all_reduce(t)
        torch.save(model.state_dict(), "ckpt.pt")
""",
        """
from accelerate import Accelerator

accelerator = Accelerator()

def evaluate(preds):
    if accelerator.is_main_process:
        preds = accelerator.gather(preds)
        print(preds.mean())
""",
        """
import torch.distributed as dist

def share(t, group):
    if dist.get_rank() == 1:
        dist.broadcast(t, src=1, group=group)
    else:
        dist.broadcast(t, src=0, group=group)
""",
        """
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

def train(mlp, x):
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    if dist.get_rank() != 0:
        loss = mlp(x).sum()
""",
        """
import torch
import torch.distributed as dist

def log_loss(loss):
    lossv = loss.detach().reshape(1)
    if dist.get_rank() == 0:
        buf = lossv.to(torch.float64)
        dist.all_reduce(buf)
    else:
        dist.all_reduce(lossv)
""",
        """
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    w = distribute_tensor(torch.randn(8, 8), mesh["tp"], [Shard(0)])
    if mesh["tp"].get_local_rank() == 0:
        print(w.full_tensor().sum())  # expect: CL101

if __name__ == "__main__":
    main()
""",
    ),
    valid=(
        """
import torch.distributed as dist

def save(model, t):
    dist.all_reduce(t)
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "ckpt.pt")
""",
        """
import torch.distributed as dist

def exchange(t, rank):
    if rank == 0:
        dist.send(t, dst=1)
    else:
        dist.recv(t, src=0)
""",
        """
import torch.distributed as dist

def reduce_on_leaders(t, rank, world_size):
    leaders = dist.new_group(list(range(0, world_size, 2)))
    if rank % 2 == 0:
        dist.all_reduce(t, group=leaders)
""",
        """
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

def train(mlp, x):
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    loss = mlp(x).sum()
""",
        """
import torch
import torch.distributed as dist

def log_loss(loss):
    lossv = loss.detach().reshape(1).to(torch.float64)
    dist.all_reduce(lossv)
""",
        """
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    w = distribute_tensor(torch.randn(8, 8), mesh["tp"], [Shard(0)])
    if mesh["dp"].get_local_rank() == 0:  # the whole tp group takes this arm
        print(w.full_tensor().sum())

if __name__ == "__main__":
    main()
""",
    ),
)
