"""Lightning: synced metrics from every rank; printing from rank zero."""

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_only


class Classifier(pl.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("val_loss", loss, sync_dist=True)
        if self.trainer.is_global_zero:
            self.log("val_loss_rank0", loss)
        return loss

    @rank_zero_only
    def print_summary(self):
        print(self.net)
