"""A toy corpus with documents of known lengths, sharded contiguously over the ranks."""
import torch

DOC_LENGTHS = [12, 9, 14, 11, 10, 13, 64, 8]


class DocShard:
    def __init__(self, rank, world, max_len):
        per = len(DOC_LENGTHS) // world
        self.lengths = DOC_LENGTHS[rank * per : (rank + 1) * per]
        self.max_len = max_len

    def __len__(self):
        return len(self.lengths)

    def batch(self, i):
        n = self.lengths[i]
        if n > self.max_len:
            raise RuntimeError(f"CUDA out of memory: document of {n} tokens")
        return torch.randn(n, 4)
