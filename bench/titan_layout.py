"""A training step laid out as torchtitan lays out a Llama job: pipeline × FSDP (dp_shard) ×
context parallel × tensor parallel, for `bench/dryrun_classes.py` (issue 33 item 2).

The mesh is torchtitan's (`ParallelDims.build_mesh`: dims `pp, dp_shard, cp, tp`, a
contiguous `arange` of the world, tp innermost); each rank's coordinates are
`(rank // stride) % size` and its four groups are made from them with
`new_group(use_local_synchronization=True)` (only the members call it), or with
`--device-mesh` by `init_device_mesh` (every rank makes every group). The model is
small and every tensor is fake: per stage `--layers` blocks whose weights are FSDP shards
(all-gathered before use, gradients reduce-scattered), a context-parallel all-gather of the
keys/values over cp, a tensor-parallel all-reduce of each block's output over tp, and a GPipe
schedule of `--microbatches` between the stages (send/recv of activations and gradients).

`--bug-stage S`: the first rank of pipeline stage S (tp, cp and dp_shard coordinates 0) alone
issues one more all-reduce on its tp group — a hang a real job meets at that step.
"""

import argparse
import os

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--pp", type=int, default=8)
p.add_argument("--dp-shard", type=int, default=32)
p.add_argument("--cp", type=int, default=2)
p.add_argument("--tp", type=int, default=8)
p.add_argument("--hidden", type=int, default=512)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--layers", type=int, default=2, help="blocks per pipeline stage")
p.add_argument("--microbatches", type=int, default=4)
p.add_argument("--bug-stage", type=int, default=None)
p.add_argument("--device-mesh", action="store_true", help="the groups of init_device_mesh")
args = p.parse_args()

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
sizes = {"pp": args.pp, "dp_shard": args.dp_shard, "cp": args.cp, "tp": args.tp}
assert world == args.pp * args.dp_shard * args.cp * args.tp, "world size is pp*dp_shard*cp*tp"
strides = {"tp": 1, "cp": args.tp, "dp_shard": args.tp * args.cp}
strides["pp"] = strides["dp_shard"] * args.dp_shard
coord = {d: (rank // strides[d]) % sizes[d] for d in sizes}


def dim_group(d):
    first = rank - coord[d] * strides[d]
    members = [first + i * strides[d] for i in range(sizes[d])]
    return dist.new_group(members, use_local_synchronization=True)


if args.device_mesh:  # torchtitan's own way: one DeviceMesh, its dims' groups
    from torch.distributed.device_mesh import init_device_mesh

    names = ("pp", "dp_shard", "cp", "tp")
    mesh = init_device_mesh("cuda", tuple(sizes[d] for d in names), mesh_dim_names=names)
    coord = {d: mesh.get_local_rank(d) for d in names}
    groups = {d: mesh.get_group(d) for d in names}
else:
    groups = {d: dim_group(d) for d in ("pp", "dp_shard", "cp", "tp")}
torch.manual_seed(0)
H, S, TP, CP, DP = args.hidden, args.seq, args.tp, args.cp, args.dp_shard
dev = torch.device("cuda")
# each block: a column-parallel and a row-parallel weight, FSDP-sharded over dp_shard
shards = [torch.empty(H * H // TP // DP, device=dev) for _ in range(2 * args.layers)]
first, last = coord["pp"] == 0, coord["pp"] == args.pp - 1


def block(x, i):
    w_in, w_out = (torch.empty(H * H // TP, device=dev) for _ in range(2))
    dist.all_gather_into_tensor(w_in, shards[2 * i], group=groups["dp_shard"])
    dist.all_gather_into_tensor(w_out, shards[2 * i + 1], group=groups["dp_shard"])
    kv = torch.empty(CP * x.numel(), device=dev)  # context parallel: every chunk's keys
    dist.all_gather_into_tensor(kv, x.flatten(), group=groups["cp"])
    h = x @ w_in.view(H, H // TP)
    y = h @ w_out.view(H // TP, H)
    dist.all_reduce(y, group=groups["tp"])  # row-parallel output
    return y


for _ in range(args.microbatches):  # GPipe: every forward, then every backward
    x = torch.empty(1, S // CP, H, device=dev)
    if not first:
        dist.recv(x, src=rank - strides["pp"])
    for i in range(args.layers):
        x = block(x, i)
    if not last:
        dist.send(x, dst=rank + strides["pp"])
for _ in range(args.microbatches):
    g = torch.empty(1, S // CP, H, device=dev)
    if not last:
        dist.recv(g, src=rank + strides["pp"])
    for _ in range(args.layers):
        dist.all_reduce(g, group=groups["tp"])  # column-parallel input gradient
    if not first:
        dist.send(g, dst=rank - strides["pp"])
for s in shards:  # FSDP: gradients reduce-scattered to their shards
    dist.reduce_scatter_tensor(s, torch.empty(s.numel() * DP, device=dev), group=groups["dp_shard"])
if (
    coord["tp"] == 0
    and coord["cp"] == 0
    and coord["dp_shard"] == 0
    and coord["pp"] == args.bug_stage
):
    dist.all_reduce(torch.empty(1024, device=dev), group=groups["tp"])  # the bug
dist.all_reduce(torch.empty(1024, device=dev), group=groups["pp"])  # the step's loss
dist.destroy_process_group()
