"""Correct: a small GPT-2-like DDP training loop that prints `loss.item()` on rank 0 every
step (written for GPUs: `.cuda()`, nccl)."""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 128, d: int = 32, layers: int = 2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(self.blocks(self.emb(idx)))


backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank = dist.get_rank()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else "cpu"
model = DDP(TinyGPT().to(device))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    idx = torch.randint(0, 128, (4, 16), device=device)
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, 128), idx.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    if rank == 0:
        print(f"step {step} loss {loss.item():.4f}")
dist.destroy_process_group()
