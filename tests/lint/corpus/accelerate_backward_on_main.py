"""accelerate: a training step whose backward (the gradient all-reduce of the prepared DDP
model) runs on the main process only."""

import torch
from accelerate import Accelerator


def train(model, opt, batches):
    accelerator = Accelerator()
    model, opt = accelerator.prepare(model, opt)
    for batch in batches:
        loss = model(batch).pow(2).mean()
        if accelerator.is_main_process:
            accelerator.backward(loss)  # expect: CL101
        opt.step()
        opt.zero_grad()
    return torch.tensor(0.0)
