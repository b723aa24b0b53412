# Reduced from https://github.com/pytorch/pytorch/issues/172668
# Fix (pytorch PR #178815): rank-parity ordering — the lower-ranked side of a peer pair flushes
# its deferred receive before its send, so the higher rank's send finds a posted receive.
import os
from datetime import timedelta

import torch
import torch.distributed as dist

ACT = 1 << 20


def order_for_parity(actions: list[tuple[str, int]], rank: int, peer: int) -> list[tuple[str, int]]:
    if rank < peer:
        return sorted(actions, key=lambda a: a[0] != "RECV")
    return actions


def run_actions(actions: list[tuple[str, int]], rank: int) -> None:
    peer = 1 - rank
    bufs: dict[int, torch.Tensor] = {}
    for op, mb in order_for_parity(actions, rank, peer):
        if op == "SEND":
            dist.send(torch.full((ACT,), float(mb)), dst=peer)
        elif op == "RECV":
            bufs[mb] = torch.empty(ACT)
            dist.recv(bufs[mb], src=peer)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    schedule = {
        0: [("SEND", 1), ("RECV", 0)],
        1: [("SEND", 0), ("RECV", 1)],
    }
    run_actions(schedule[rank], rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
