"""Megatron-style code: the tensor-parallel leader alone joins a TP broadcast."""

import torch
import torch.distributed as dist
from megatron.core import parallel_state


def load_vocab_shard(path):
    group = parallel_state.get_tensor_model_parallel_group()
    src = parallel_state.get_tensor_model_parallel_src_rank()
    vocab = torch.empty(0)
    if parallel_state.get_tensor_model_parallel_rank() == 0:
        vocab = torch.load(path)
        dist.broadcast(vocab, src=src, group=group)  # expect: CL101
    return vocab
