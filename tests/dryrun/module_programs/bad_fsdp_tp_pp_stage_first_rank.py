"""torch's own parallel modules on a pp x dp x tp mesh from init_device_mesh: FSDP2's
`fully_shard` over dp, `parallelize_module` over tp, a `PipelineStage` with a `ScheduleGPipe`
over pp (its warm-up vote is a value the stages send each other). The first rank of stage 1
alone issues one more all-reduce on its tp group: the hang rank classes must find while
deriving the other ranks.

`--uneven`: the feed-forward's first weight has 3 rows, which FSDP2 cuts into shards of 2 and
1 rows over dp 2: the shard size differs between the ranks of a class, so it must pin; the
ranks whose shard has one row issue one more all-reduce."""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

p = argparse.ArgumentParser()
p.add_argument("--pp", type=int, default=2)
p.add_argument("--dp", type=int, default=2)
p.add_argument("--tp", type=int, default=2)
p.add_argument("--uneven", action="store_true")
args = p.parse_args()
DIM = 8
HIDDEN = 3 if args.uneven else 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


torch.manual_seed(0)
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (args.pp, args.dp, args.tp), mesh_dim_names=("pp", "dp", "tp"))
stage_index = mesh.get_local_rank("pp")
model = Block()
if not args.uneven:
    parallelize_module(model, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
fully_shard(model, mesh=mesh["dp"])
x = torch.randn(2, 4, DIM)
stage = PipelineStage(
    model,
    stage_index,
    args.pp,
    torch.device("cpu"),
    input_args=x.requires_grad_(stage_index > 0),
    output_args=torch.randn(2, 4, DIM, requires_grad=True),
    group=mesh.get_group("pp"),
)
schedule = ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda y, t: y.sum())
if stage_index == 0:
    schedule.step(torch.randn(4, 4, DIM))
elif stage_index == args.pp - 1:
    schedule.step(target=torch.randn(4, 4, DIM), losses=[])
else:
    schedule.step()
tp, dp = mesh.get_local_rank("tp"), mesh.get_local_rank("dp")
if args.uneven and model.w1.weight.to_local().shape[0] == 1:
    dist.all_reduce(torch.zeros(1), group=mesh.get_group("dp"))  # the short shard's ranks
if not args.uneven and stage_index == 1 and tp == 0 and dp == 0:
    dist.all_reduce(torch.zeros(1), group=mesh.get_group("tp"))  # expect: CL202
dist.all_reduce(torch.zeros(1), group=mesh.get_group("pp"))
dist.destroy_process_group()
