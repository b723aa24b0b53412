"""Lightning: an all_gather inside a @rank_zero_only hook."""

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_only


class Embedder(pl.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.outputs = []

    def predict_step(self, batch, batch_idx):
        emb = self.net(batch)
        self.outputs.append(emb)
        return emb

    @rank_zero_only
    def dump(self, path):
        everything = self.all_gather(torch.cat(self.outputs))  # expect: CL101
        torch.save(everything, path)
