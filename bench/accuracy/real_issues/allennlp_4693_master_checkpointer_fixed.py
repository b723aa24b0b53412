# Reduced from https://github.com/allenai/allennlp/pull/4693 (discussion of the DeepSpeed hang)
# Fix (proposed in the thread): the checkpointer says on which ranks it must be called; the
# DeepSpeed checkpointer is called on every rank, and only the master writes.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class DeepspeedCheckpointer:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def call_on_rank(self, rank: int) -> bool:
        return True

    def save_checkpoint(self, epoch: int, model: torch.nn.Module) -> None:
        dist.barrier()
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), os.path.join(self.directory, f"model_{epoch}.pt"))


class Trainer:
    def __init__(self, rank: int) -> None:
        self._rank = rank
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
            if self._checkpointer is not None and self._checkpointer.call_on_rank(self._rank):
                self._checkpointer.save_checkpoint(epoch, self.model)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    Trainer(dist.get_rank()).train(epochs=3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
