import torch
import torch.distributed as dist


def train(model, loader, val_loader, patience, opt):
    best, bad = float("inf"), 0
    for epoch in range(100):
        for x, y in loader:
            loss = model(x, y)
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
        local = torch.tensor([sum(model(x, y).item() for x, y in val_loader)])
        dist.all_reduce(local)  # every rank compares the same validation loss
        val = local.item()
        if val < best:
            best, bad = val, 0
        else:
            bad += 1
        if bad >= patience:
            break
