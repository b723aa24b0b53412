# Reduced from https://github.com/pytorch/pytorch/issues/172668
# Cause: with receives deferred until just before the compute that needs them, two adjacent
# pipeline ranks both reach a blocking send to each other first (rank 0: SEND_F1, RECV_B0;
# rank 1: SEND_B0, RECV_F1); neither posts its receive, so neither send completes.
import os
from datetime import timedelta

import torch
import torch.distributed as dist

ACT = 1 << 20


def run_actions(actions: list[tuple[str, int]], rank: int) -> None:
    bufs: dict[int, torch.Tensor] = {}
    for op, mb in actions:
        peer = 1 - rank
        if op == "SEND":
            dist.send(torch.full((ACT,), float(mb)), dst=peer)
        elif op == "RECV":
            bufs[mb] = torch.empty(ACT)
            dist.recv(bufs[mb], src=peer)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    # steady state of an interleaved schedule with the receive of each action deferred
    schedule = {
        0: [("SEND", 1), ("RECV", 0)],  # send forward of mb 1, then receive backward of mb 0
        1: [("SEND", 0), ("RECV", 1)],  # send backward of mb 0, then receive forward of mb 1
    }
    run_actions(schedule[rank], rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
