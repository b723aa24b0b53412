# Reduced from https://github.com/huggingface/transformers/pull/29980
# Cause: with ZeRO-3 every forward all-gathers the partitioned parameters; saving a
# prompt-tuning model runs the prompt encoder's forward in save_pretrained on rank 0 only, so
# rank 0 waits in that all-gather while the others go on training.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class Zero3Embedding:
    """A partitioned embedding: forward all-gathers the full weight (ZeRO stage 3)."""

    def __init__(self, rows: int, dim: int) -> None:
        world = dist.get_world_size()
        self.rows, self.dim = rows, dim
        self.shard = torch.randn(rows * dim // world)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        parts = [torch.zeros_like(self.shard) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, self.shard)
        weight = torch.cat(parts).view(self.rows, self.dim)
        return weight[ids]


def save_pretrained(prompt_encoder: Zero3Embedding, path: str) -> None:
    prompt_tokens = torch.arange(8)
    embeddings = prompt_encoder.forward(prompt_tokens)
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
        if step == 1 and dist.get_rank() == 0:
            save_pretrained(prompt_encoder, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
