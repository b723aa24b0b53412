"""A Llama-3-8B-shaped training step for `bench/dryrun.py --model llama3-8b` (issue 11).

The shapes of Llama-3-8B: 32 layers, hidden 4,096, 32 attention heads with 8 key/value heads,
SwiGLU feed-forward of 14,336, vocabulary 128,256, RMSNorm. `--parallel tp-dp`: tensor
parallel over `--tp` ranks with torchtitan's plan for Llama (attention and feed-forward
projections colwise in, rowwise out; the output head colwise), FSDP2 over the data-parallel
dimension, one `fully_shard` per block and one for the root. About 8 billion parameters: the
script is written for GPUs (torchrun); the bench only dry-runs it, where no weight is allocated.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--parallel", choices=("tp-dp",), default="tp-dp")
parser.add_argument("--tp", type=int, default=2)
parser.add_argument("--steps", type=int, default=1)
parser.add_argument("--layers", type=int, default=32)
parser.add_argument("--seq", type=int, default=2048)
parser.add_argument("--print-loss", action="store_true", help="print loss.item() on rank 0")
args = parser.parse_args()

DIM, HEADS, KV_HEADS, FFN, VOCAB, BATCH = 4096, 32, 8, 14336, 128256, 1
HEAD_DIM = DIM // HEADS


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        # under TP each rank holds a slice of the heads: -1 takes the local count
        q = self.wq(x).view(b, t, -1, HEAD_DIM).transpose(1, 2)
        k = self.wk(x).view(b, t, -1, HEAD_DIM).transpose(1, 2)
        v = self.wv(x).view(b, t, -1, HEAD_DIM).transpose(1, 2)
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
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


class Llama(nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(layers))
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
world = dist.get_world_size()
device = torch.device("cuda", local_rank)
with torch.device("meta"):
    model = Llama(args.layers)

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402
from torch.distributed.tensor import Replicate  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

mesh = init_device_mesh("cuda", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
parallelize_module(model, mesh["tp"], {"output": ColwiseParallel(output_layouts=Replicate())})
for block in model.layers:
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
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for block in model.layers:
    fully_shard(block, mesh=mesh["dp"], mp_policy=mp)
fully_shard(model, mesh=mesh["dp"], mp_policy=mp)
model.to_empty(device=device)

opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(args.steps):
    idx = torch.randint(0, VOCAB, (BATCH, args.seq), device=device)
    logits = model(idx)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), idx.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    if args.print_loss and dist.get_rank() == 0:
        print(f"step {step} loss {loss.item():.4f}")
dist.destroy_process_group()
