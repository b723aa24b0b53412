# Reduced from https://github.com/huggingface/transformers/pull/29980
# Fix: the prompt embeddings are computed on every rank (every rank joins the ZeRO-3 gather);
# only rank 0 writes the file.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class Zero3Embedding:
    def __init__(self, rows: int, dim: int) -> None:
        world = dist.get_world_size()
        self.rows, self.dim = rows, dim
        self.shard = torch.randn(rows * dim // world)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        parts = [torch.zeros_like(self.shard) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, self.shard)
        weight = torch.cat(parts).view(self.rows, self.dim)
        return weight[ids]


def save_pretrained(prompt_encoder: Zero3Embedding, path: str, is_main: bool) -> None:
    embeddings = prompt_encoder.forward(torch.arange(8))
    if is_main:
        torch.save(embeddings, os.path.join(path, "adapter_model.bin"))


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    torch.manual_seed(dist.get_rank())
    prompt_encoder = Zero3Embedding(rows=8, dim=16)
    out = tempfile.mkdtemp()
    for step in range(4):
        emb = prompt_encoder.forward(torch.tensor([step % 8]))
        grad = emb.sum().reshape(1)
        dist.all_reduce(grad)
        if step == 1:
            save_pretrained(prompt_encoder, out, is_main=dist.get_rank() == 0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
