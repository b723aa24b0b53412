"""Hangs: each rank makes a tensor of its own loss with its accelerator's `FloatTensor`
(DeepSpeed's `get_accelerator().FloatTensor([float(x)])`) and tests it without agreeing on
it first: rank 0's loss is above zero and rank 1's is not, so rank 0 waits in a barrier rank
1 never enters."""

import functools

import torch
import torch.distributed as dist


class Accelerator:
    @property
    def FloatTensor(self):  # DeepSpeed's name
        return functools.partial(torch.tensor, dtype=torch.float)


def get_accelerator() -> Accelerator:
    return Accelerator()


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(4 * rank)
model = torch.nn.Linear(64, 64)
loss = model(torch.randn(8, 64)).sum()
logged = get_accelerator().FloatTensor([float(loss)])  # the rank's own
if logged[0].item() > 0:  # 7.04 on rank 0, -2.96 on rank 1
    dist.barrier()
dist.destroy_process_group()
