# Reduced from https://github.com/allenai/allennlp/pull/4693 (discussion of the DeepSpeed hang)
# Cause: the trainer only asks its checkpointer to save on the master process; the DeepSpeed
# checkpointer delegates to engine.save_checkpoint, whose barrier the workers never reach,
# and their next all-reduce (memory logging) pairs with nothing.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class DeepspeedCheckpointer:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def save_checkpoint(self, epoch: int, model: torch.nn.Module) -> None:
        dist.barrier()  # inside DeepSpeedEngine.save_checkpoint
        torch.save(model.state_dict(), os.path.join(self.directory, f"model_{epoch}.pt"))


class Trainer:
    def __init__(self, rank: int) -> None:
        self._master = rank == 0
        self.model = torch.nn.Linear(4, 2)
        self._checkpointer = DeepspeedCheckpointer(tempfile.mkdtemp())

    def log_memory(self) -> None:
        mem = torch.tensor([float(torch.randint(0, 10, (1,)))])
        dist.all_reduce(mem, op=dist.ReduceOp.MAX)

    def train(self, epochs: int) -> None:
        for epoch in range(epochs):
            grad = torch.ones(2)
            dist.all_reduce(grad)
            self.log_memory()
            if self._master and self._checkpointer is not None:
                self._checkpointer.save_checkpoint(epoch, self.model)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    Trainer(dist.get_rank()).train(epochs=3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
