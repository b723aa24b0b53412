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
        val = sum(model(x, y).item() for x, y in val_loader)  # this rank's shard only
        if val < best:
            best, bad = val, 0
        else:
            bad += 1
        if bad >= patience:
            break
