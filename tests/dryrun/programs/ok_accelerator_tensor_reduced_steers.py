"""Correct: DeepSpeed's gradient-norm code as it is written — each rank sums its parameters'
squared norms with `float()`, makes a tensor of the total with its accelerator's
`FloatTensor` (`get_accelerator().FloatTensor([float(total_norm)])`, a callable a call
returns), all-reduces it and tests the global norm. Past the real re-run budget the dry-run
once stopped at `float()`: where the number went could not be named (exit 2)."""

import functools

import torch
import torch.distributed as dist


class Accelerator:
    @property
    def FloatTensor(self):  # DeepSpeed's name
        return functools.partial(torch.tensor, dtype=torch.float)


_ACCELERATOR = Accelerator()


def get_accelerator() -> Accelerator:
    return _ACCELERATOR


def grad_norm(model: torch.nn.Module) -> float:
    total_norm = 0.0
    for p in model.parameters():
        total_norm += float(p.grad.norm()) ** 2
    total_norm_cuda = get_accelerator().FloatTensor([float(total_norm)])
    dist.all_reduce(total_norm_cuda)
    total_norm = total_norm_cuda[0].item() ** 0.5
    if total_norm == float("inf") or total_norm != total_norm:
        total_norm = -1.0
    return total_norm


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())  # each rank its own weights and data
    model = torch.nn.Linear(64, 64)
    model(torch.randn(8, 64)).sum().backward()
    if grad_norm(model) > 1.0:  # the global norm: the same on every rank
        dist.all_reduce(model.weight.grad)
    dist.barrier()
    dist.destroy_process_group()


main()
