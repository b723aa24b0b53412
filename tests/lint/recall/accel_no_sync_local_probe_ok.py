"""The main process alone takes an extra backward of a probe loss under
`accelerator.no_sync(model)`: no all-reduce is made there, so no other process waits for it;
every process then takes the step's synced backward."""

import torch
from accelerate import Accelerator


def main():
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    for _step in range(8):
        if accelerator.is_main_process:
            with accelerator.no_sync(model):
                probe = model(torch.ones(1, 4)).sum()
                accelerator.backward(probe)
            opt.zero_grad()
        loss = model(torch.randn(2, 4)).sum()
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
