"""Lightning, manual optimization under DDP: every rank steps; only rank zero prints."""

import lightning.pytorch as pl
import torch


class Generator(pl.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.net(batch).pow(2).mean()
        self.manual_backward(loss)
        opt.step()
        opt.zero_grad()
        if self.global_rank == 0:
            print(f"step {batch_idx}: {loss.item():.3f}")
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
