"""accelerate gradient accumulation by hand, with a per-process accumulation length: the main
process syncs every 2 steps, the others every 4. Inside `accelerator.no_sync(model)` the
backward keeps its gradients local (DDP's `no_sync`); outside it all-reduces them, so the
processes' all-reduces pair different steps."""

import torch
from accelerate import Accelerator


def main():
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    accum = 2 if accelerator.is_main_process else 4
    for step in range(8):
        loss = model(torch.randn(2, 4)).sum()
        if (step + 1) % accum != 0:
            with accelerator.no_sync(model):
                accelerator.backward(loss)
        else:
            accelerator.backward(loss)  # expect: CL101
            opt.step()
            opt.zero_grad()


if __name__ == "__main__":
    main()
