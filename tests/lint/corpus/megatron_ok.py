"""Megatron-style code: src rank from parallel_state; stage checks around dp collectives."""

import torch.distributed as dist
from megatron.core import parallel_state


def broadcast_batch(batch):
    src = parallel_state.get_tensor_model_parallel_src_rank()
    group = parallel_state.get_tensor_model_parallel_group()
    for key in sorted(batch):
        dist.broadcast(batch[key], src=src, group=group)
    return batch


def average_loss(loss):
    if parallel_state.is_pipeline_last_stage():
        dist.all_reduce(loss, group=parallel_state.get_data_parallel_group())
        loss /= parallel_state.get_data_parallel_world_size()
    return loss


def sync_embeddings(grad):
    if parallel_state.is_rank_in_embedding_group():
        dist.all_reduce(grad, group=parallel_state.get_embedding_group())
