"""A correct job launched the way Slurm launches it: each rank its own process, rank 0's
process hosts the TCPStore (env:// rendezvous) and leaves right after the last collective;
ranks 1 and 2 go on talking to each other point-to-point, which needs no store."""

from __future__ import annotations

import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=30))
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
if rank == 0:
    # one write of the whole line: the ranks share one pipe
    sys.stdout.write(f"rank 0 result {t.tolist()}\n")
    sys.stdout.flush()
else:
    store_host = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    for _ in range(600):  # until rank 0, and the store with it, is gone
        try:
            socket.create_connection(store_host, timeout=0.5).close()
        except OSError:
            break
        time.sleep(0.1)
    print(f"rank {rank}: the store is gone", file=sys.stderr, flush=True)
    for step in range(3):
        msg = torch.full((3 + step,), float(rank))
        if rank == 1:
            dist.send(msg, dst=2)
            dist.recv(msg, src=2)
        else:
            dist.recv(msg, src=1)
            dist.send(msg, dst=1)
    time.sleep(1.0)  # the watchdog meets the missing store too
    # one write of the whole line: the ranks share one pipe
    sys.stdout.write(f"rank {rank} result {msg.tolist()}\n")
    sys.stdout.flush()
