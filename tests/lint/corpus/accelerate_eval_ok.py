"""accelerate evaluation: every process gathers, the main process prints."""

import torch
from accelerate import Accelerator


def evaluate(model, eval_loader):
    accelerator = Accelerator()
    model, eval_loader = accelerator.prepare(model, eval_loader)
    model.eval()
    correct = []
    for batch in eval_loader:
        with torch.no_grad():
            logits = model(batch["input_ids"])
        correct.append((logits.argmax(-1) == batch["labels"]).float())
    everything = accelerator.gather_for_metrics(torch.cat(correct))
    if accelerator.is_main_process:
        print(f"accuracy: {everything.mean().item():.3f}")
    accelerator.wait_for_everyone()
