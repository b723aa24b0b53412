"""A Llama-shaped training step built as torchtitan builds it, with torch's own parallel modules,
for `bench/dryrun_titan_real.py` (issue 33): a 4-D mesh `pp, dp_shard, cp, tp` from
`init_device_mesh` (contiguous, tp innermost), tensor parallelism with `parallelize_module`
(attention and feed-forward colwise in, rowwise out), FSDP2 `fully_shard` over the flattened
`dp_shard_cp` dimension (one per block and one per stage, torchtitan's `apply_fsdp`),
pipeline parallelism with `torch.distributed.pipelining` (one `PipelineStage` per rank, the
layers split between stages as `pipeline_llama` splits them, a `ScheduleGPipe`). cp is a mesh
dimension FSDP2 shards over and each rank holds its `seq / cp` share of the sequence;
`context_parallel`'s ring attention is not run (not tried under rank classes yet).

`--bug-stage S`: the first rank of pipeline stage S (its dp_shard, cp and tp coordinates 0)
alone issues one more all-reduce on its tp group after the step — a hang a real job meets there.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

p = argparse.ArgumentParser()
p.add_argument("--pp", type=int, default=8)
p.add_argument("--dp-shard", type=int, default=32)
p.add_argument("--cp", type=int, default=2)
p.add_argument("--tp", type=int, default=8)
# Llama 3 8B's widths (torchtitan's `llama3` "8B": dim 4096, 32 heads, feed-forward 14336,
# vocabulary 128256): every FSDP2 shard then has the same size over dp_shard x cp = 64 with
# tp 8 (the feed-forward's 14336 / 8 / 64 = 28 rows). Narrower widths give uneven shards at
# that size (dim 256: 32 rows of wq per tp rank over 64 ranks), which differ per rank and
# pin it: each dp_shard x cp coordinate is then a class of its own, as it must be.
p.add_argument("--dim", type=int, default=4096)
p.add_argument("--heads", type=int, default=32)
p.add_argument("--ffn-dim", type=int, default=14336)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--vocab", type=int, default=128256)
p.add_argument("--layers", type=int, default=2, help="blocks per pipeline stage")
p.add_argument("--microbatches", type=int, default=2)
p.add_argument("--bug-stage", type=int, default=None)
args = p.parse_args()
DIM, HEADS, FFN, SEQ, VOCAB = args.dim, args.heads, args.ffn_dim, args.seq, args.vocab


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (
            w(x).view(b, t, -1, DIM // HEADS).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(a.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, FFN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Stage(nn.Module):
    """One pipeline stage of the model: the embedding on the first, the head on the last."""

    def __init__(self, first: bool, last: bool, layers: int):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM) if first else None
        self.layers = nn.ModuleDict({str(i): Block() for i in range(layers)})
        self.norm = nn.RMSNorm(DIM) if last else None
        self.output = nn.Linear(DIM, VOCAB, bias=False) if last else None

    def forward(self, x):
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h)) if self.output is not None else h


torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
names = ("pp", "dp_shard", "cp", "tp")
sizes = (args.pp, args.dp_shard, args.cp, args.tp)
mesh = init_device_mesh("cuda", sizes, mesh_dim_names=names)
mesh["dp_shard", "cp"]._flatten("dp_shard_cp")  # torchtitan's FSDP dimension
stage_index = mesh.get_local_rank("pp")
first, last = stage_index == 0, stage_index == args.pp - 1
dev = torch.device("cuda")
with torch.device("meta"):
    model = Stage(first, last, args.layers)
for block in model.layers.values():
    parallelize_module(
        block,
        mesh["tp"],
        {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
        },
    )
for block in model.layers.values():
    fully_shard(block, mesh=mesh["dp_shard_cp"], reshard_after_forward=False)
fully_shard(model, mesh=mesh["dp_shard_cp"], reshard_after_forward=False)
model.to_empty(device=dev)

MB = 1  # microbatch size
local_seq = SEQ // args.cp
x_in = (
    torch.empty(MB, local_seq, dtype=torch.long, device=dev)
    if first
    else torch.empty(MB, local_seq, DIM, device=dev)
)
x_out = torch.empty(MB, local_seq, VOCAB if last else DIM, device=dev, requires_grad=True)
x_in.requires_grad_(not first)  # activations carry gradients back, tokens do not
stage = PipelineStage(
    model,
    stage_index,
    args.pp,
    dev,
    input_args=x_in,
    output_args=x_out,
    group=mesh.get_group("pp"),
)


def loss_fn(pred, labels):
    return F.cross_entropy(pred.flatten(0, 1), labels.flatten())


schedule = ScheduleGPipe(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
torch.manual_seed(0)
batch = args.microbatches * MB
tokens = torch.randint(0, VOCAB, (batch, local_seq), device=dev)
labels = torch.randint(0, VOCAB, (batch, local_seq), device=dev)
if first:
    schedule.step(tokens)
elif last:
    losses = []
    schedule.step(target=labels, losses=losses)
else:
    schedule.step()
coord = {d: mesh.get_local_rank(d) for d in names}
if (
    coord["tp"] == 0
    and coord["cp"] == 0
    and coord["dp_shard"] == 0
    and coord["pp"] == args.bug_stage
):
    dist.all_reduce(torch.empty(1024, device=dev), group=mesh.get_group("tp"))  # the bug
dist.all_reduce(torch.empty(1, device=dev), group=mesh.get_group("pp"))  # the step's loss
dist.destroy_process_group()
