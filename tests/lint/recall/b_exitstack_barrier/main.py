# nproc: 2
# label: hang (real run: torchrun, gloo on CPU, torch 2.13; rank 0 timeout, rank 1 peer_closed)
import argparse
import contextlib
import logging
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger("export")


class Exporter:
    def __init__(self, out_dir: str, rank: int):
        self.out_dir = out_dir
        self.rank = rank
        self.is_main = rank == 0

    def export(self, model: torch.nn.Module) -> None:
        with contextlib.ExitStack() as stack:
            if self.is_main:
                # the other ranks must not read the file before it is complete
                stack.callback(dist.barrier)  # expect: CL115
                torch.save(model.state_dict(), os.path.join(self.out_dir, "model.pt"))
            log.info("rank %d export section done", self.rank)
        dist.all_reduce(torch.zeros(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=tempfile.mkdtemp())
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30"))))
    model = torch.nn.Linear(3, 3)
    Exporter(args.out, dist.get_rank()).export(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
