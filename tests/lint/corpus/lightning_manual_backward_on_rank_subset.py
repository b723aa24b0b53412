"""Lightning, manual optimization under DDP: the backward (whose gradient all-reduce every
rank must join) runs on even ranks only."""

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
        if self.global_rank % 2 == 0:
            self.manual_backward(loss)  # expect: CL101
            opt.step()
            opt.zero_grad()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
