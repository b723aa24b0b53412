import torch
import torch.distributed as dist

def train(model, batches):
    for batch in batches:
        try:
            loss = model(batch).sum()
            loss.backward()
        except torch.cuda.OutOfMemoryError:
            continue
        for p in model.parameters():
            dist.all_reduce(p.grad)
