"""commlint accuracy benchmark program lightning_w4_0754.

family: lightning (Lightning Trainer (DDP)), world size 4
mutation: early_exit (bug): rank 0 leaves the training loop before lit_log at step 1

Run: torchrun --nproc-per-node 4 lightning_w4_0754.py
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
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    # Lightning reads the launcher's environment (torchrun) and keeps the initialized group.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    os.environ.update(LOCAL_WORLD_SIZE=str(world_size), NODE_RANK="0")
    world = dist.new_group(list(range(world_size)), timeout=timeout)
    probe_gen = torch.Generator().manual_seed(500 + rank)
    torch.manual_seed(9000)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    data_gen = torch.Generator().manual_seed(9100)
    lossv = torch.zeros(1)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net
            self.automatic_optimization = False

        def forward(self, x):
            return self.net(x)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

        def training_step(self, batch, step):
            nonlocal lossv
            model, opt, x = self, self.optimizers(), batch[0]
            loss = torch.zeros(())
            loss = (model(x) - 1.0).pow(2).mean()
            self.manual_backward(loss)
            opt.step()
            opt.zero_grad()
            lossv = loss.detach().reshape(1)
            gathered = self.all_gather(lossv)
            if rank == 0 and step == 1:
                return None
            self.log("loss", lossv.sum(), sync_dist=True)
            dist.all_reduce(lossv, group=world)

    data = TensorDataset(torch.randn(4 * STEPS * world_size, 8, generator=data_gen))
    trainer = L.Trainer(
        strategy="ddp",
        accelerator="cpu",
        devices=world_size,
        max_epochs=1,
        limit_train_batches=STEPS,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(Module(), DataLoader(data, batch_size=4))
    return [("params", float(sum(p.sum() for p in net.parameters()))), ("loss", float(lossv.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
