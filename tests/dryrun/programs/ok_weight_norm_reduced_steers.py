"""Correct: DeepSpeed's weight-norm pattern — each rank sums its parameters' squared norms with
`float()`, puts the total into a tensor, all-reduces it, and every rank tests the same global
norm. Past the real re-run budget the dry-run once stopped at `float()` (the number "may
steer"); now the tensor made from it holds no value the dry-run knows, and the all-reduce
makes it the same on every rank. As in DeepSpeed, the name that summed the local norms is
given the global one and then tested: the test reads the new value, not the local sum."""

import torch
import torch.distributed as dist


def weight_norm(model: torch.nn.Module) -> float:
    total = 0.0
    for p in model.parameters():
        total += float(p.grad.norm()) ** 2
    norm = torch.tensor([float(total)])
    dist.all_reduce(norm)
    total = norm[0].item() ** 0.5
    if total == float("inf") or total != total:
        total = -1.0
    return total


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())  # each rank its own weights and data
    model = torch.nn.Linear(64, 64)
    model(torch.randn(8, 64)).sum().backward()
    if weight_norm(model) > 1.0:  # the global norm: the same on every rank
        dist.all_reduce(model.weight.grad)
    dist.barrier()
    dist.destroy_process_group()


main()
