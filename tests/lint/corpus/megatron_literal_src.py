"""Megatron-style code broadcasting from global rank 0 on the tensor-parallel group."""

import torch
import torch.distributed as dist
from megatron.core import parallel_state


def broadcast_batch(batch):
    tp_group = parallel_state.get_tensor_model_parallel_group()
    for key in sorted(batch):
        dist.broadcast(batch[key], src=0, group=tp_group)  # expect: CL106
    return batch


def make_buffer(shape):
    return torch.empty(shape)
