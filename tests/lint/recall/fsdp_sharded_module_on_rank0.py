import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def evaluate(model, batches):
    total = 0.0
    for x in batches:
        total += model(x).sum().item()  # expect: CL115
    return total


def main(steps_file):
    dist.init_process_group("gloo")
    with open(steps_file) as f:
        steps = int(f.read())
    model = fully_shard(torch.nn.Linear(4, 4))
    batches = [torch.randn(2, 4) for _ in range(steps)]
    evaluate(model, batches)
    if dist.get_rank() == 0:
        evaluate(model, batches)  # expect: CL101
    dist.destroy_process_group()


if __name__ == "__main__":
    main("steps.txt")
