"""commlint accuracy benchmark program transformers_w4_0747.

family: transformers (transformers Trainer (DDP)), world size 4
mutation: duplicate (bug): hf_gather issued twice on rank 0

Run: torchrun --nproc-per-node 4 transformers_w4_0747.py
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = float(os.environ.get("ACC_TIMEOUT", "10"))
STEPS = 3
TP = 2


def is_main_process() -> bool:
    return dist.get_rank() == 0


def main(rank: int, world_size: int) -> list[tuple[str, float]]:
    timeout = timedelta(seconds=TIMEOUT)
    import tempfile

    from transformers import Trainer, TrainingArguments

    # transformers (through accelerate) reads the launcher's environment and keeps the group.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    os.environ.update(LOCAL_WORLD_SIZE=str(world_size))
    world = dist.new_group(list(range(world_size)), timeout=timeout)
    probe_gen = torch.Generator().manual_seed(500 + rank)
    torch.manual_seed(9500)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    data_gen = torch.Generator().manual_seed(9600)
    lossv = torch.zeros(1)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = net

        def forward(self, x):
            return {"loss": (self.body(x) - 1.0).pow(2).mean()}

    class StepTrainer(Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            nonlocal lossv
            step = self.state.global_step
            loss = torch.zeros(())
            loss = super().training_step(model, inputs, num_items_in_batch)
            lossv = loss.detach().reshape(1)
            gathered = self.accelerator.gather(lossv)
            if rank == 0:
                gathered = self.accelerator.gather(lossv)
            dist.all_reduce(lossv, group=world)
            return loss

    data = [{"x": torch.randn(8, generator=data_gen)} for _ in range(4 * STEPS * world_size)]
    args = TrainingArguments(
        output_dir=os.path.join(tempfile.gettempdir(), "acc_hf_out"),
        per_device_train_batch_size=4,
        max_steps=STEPS,
        learning_rate=0.05,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    StepTrainer(model=Net(), args=args, train_dataset=data).train()
    return [("params", float(sum(p.sum() for p in net.parameters()))), ("loss", float(lossv.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
