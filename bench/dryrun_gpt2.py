"""A GPT-2-small-like training step (12 layers, hidden 768, vocab 50257) for `bench/dryrun.py`.

`--parallel ddp`: DDP over every rank. `--parallel tp-dp`: tensor parallel over pairs of ranks
(attention and MLP colwise/rowwise), FSDP2 over the data-parallel dimension. Runs for real on
GPUs with torchrun; the bench only dry-runs it.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--parallel", choices=("ddp", "tp-dp"), default="ddp")
parser.add_argument("--tp", type=int, default=2)
parser.add_argument("--steps", type=int, default=1)
parser.add_argument("--layers", type=int, default=12)
parser.add_argument("--hidden", type=int, default=768)
parser.add_argument(
    "--print-loss", action="store_true", help="print loss.item() on rank 0 every step"
)
args = parser.parse_args()

VOCAB, SEQ, BATCH, HEADS = 50257, 128, 2, 12


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.ln1(x)
        b, t, _ = h.shape
        q, k, v = (m(h).view(b, t, -1, 64).transpose(1, 2) for m in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers: int, d: int):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, d)
        self.wpe = nn.Embedding(SEQ, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
world = dist.get_world_size()
device = torch.device("cuda", local_rank)
model = GPT(args.layers, args.hidden).to(device)

if args.parallel == "ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model, device_ids=[local_rank])
else:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cuda", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
    for block in model.blocks:
        parallelize_module(
            block,
            mesh["tp"],
            {
                "q": ColwiseParallel(),
                "k": ColwiseParallel(),
                "v": ColwiseParallel(),
                "o": RowwiseParallel(),
                "fc": ColwiseParallel(),
                "proj": RowwiseParallel(),
            },
        )
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])

opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(args.steps):
    idx = torch.randint(0, VOCAB, (BATCH, SEQ), device=device)
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, VOCAB), idx.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    if args.print_loss and dist.get_rank() == 0:
        print(f"step {step} loss {loss.item():.4f}")
dist.destroy_process_group()
