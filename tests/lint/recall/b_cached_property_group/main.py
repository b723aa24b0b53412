# nproc: 4
# label: hang (real run: torchrun, gloo on CPU, torch 2.13; rank 0 stuck, rank 1 timeout, rank 2 stuck, rank 3 timeout)
import argparse
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from topology import Topology

log = logging.getLogger(__name__)


class StatsReporter:
    def __init__(self, topo: Topology):
        self.topo = topo

    def report(self, loss: torch.Tensor) -> None:
        if self.topo.is_replica_leader:
            # leaders average the loss of their replica group
            dist.all_reduce(loss, group=self.topo.dp_group)  # expect: CL115
            log.info("replica loss %.4f", loss.item() / self.topo.dp_size)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", type=int, default=2)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30"))))
    topo = Topology(args.dp)
    reporter = StatsReporter(topo)
    for step in range(2):
        loss = torch.tensor([float(step + dist.get_rank())])
        reporter.report(loss)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
