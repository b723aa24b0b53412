"""Small 2-rank programs for the guard's real tests: `guarded.py MODE` under torchrun, or
`guarded.py --spawn MODE` starting its own processes and calling `commlint.guard.install()`."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

GUARD_TIMEOUT = float(os.environ.get("COMMLINT_GUARD_TIMEOUT", "2"))


def body(mode: str) -> None:
    rank = dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)
    if mode == "slow":
        # rank 1 computes for longer than the guard timeout before it joins: slow, not stuck
        if rank == 1:
            time.sleep(GUARD_TIMEOUT * 2.5)
        dist.all_reduce(t)
        side = dist.new_group([0, 1], timeout=timedelta(seconds=30))
        work = dist.all_reduce(t, group=side, async_op=True)
        if rank == 0:
            time.sleep(GUARD_TIMEOUT * 1.5)
        work.wait()
    elif mode == "cycle":
        peer = 1 - rank
        dist.send(t, peer)  # both ranks send first: a send/send deadlock
        dist.recv(t, peer)
    elif mode == "order":
        a = dist.new_group([0, 1], timeout=timedelta(seconds=30))
        b = dist.new_group([0, 1], timeout=timedelta(seconds=30))
        first, second = (a, b) if rank == 0 else (b, a)
        dist.all_reduce(t, group=first)  # groups in different orders: cross-group deadlock
        dist.all_reduce(t, group=second)
    elif mode == "dtensor":
        # DTensor's redistributions are functional collectives: all_gathers, an all_reduce
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

        mesh = init_device_mesh("cpu", (2,))
        dt = distribute_tensor(torch.arange(8.0), mesh, [Shard(0)])
        full = dt.full_tensor()  # all_gather
        again = dt.redistribute(mesh, [Replicate()]).to_local()  # all_gather
        partial = DTensor.from_local(torch.ones(4) * (rank + 1), mesh, [Partial()])
        summed = partial.redistribute(mesh, [Replicate()]).to_local()  # all_reduce: 3.0 each
        t = full[:4] + again[4:] + summed
    elif mode == "dtensor_skip":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        mesh = init_device_mesh("cpu", (2,))
        dt = distribute_tensor(torch.arange(8.0), mesh, [Shard(0)])
        if rank == 0:
            t = dt.full_tensor()  # rank 0 only: an all_gather rank 1 never joins
        dist.all_reduce(t)
    elif mode == "dtensor_wait":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        side = dist.new_group([0, 1], timeout=timedelta(seconds=30))
        mesh = init_device_mesh("cpu", (2,))
        dt = distribute_tensor(torch.arange(8.0), mesh, [Shard(0)])
        if rank == 0:
            t = dt.full_tensor()  # waits in wait_tensor for an all_gather rank 1 never joins
        else:
            dist.barrier(group=side)  # waits for a barrier rank 0 never joins
    elif mode == "late_size":
        # five steps the same on both ranks (the guard then trusts this path and only
        # publishes), then rank 1 all-reduces a tensor of another size from another line:
        # gloo would abort at once; the rank that left the path checks first
        for step in range(6):
            if rank == 1 and step == 5:
                dist.all_reduce(torch.ones(8))
            else:
                dist.all_reduce(t)
    elif mode == "ddp_extra":
        # three DDP steps (DDP rebuilds its buckets in the second), one under no_sync (no
        # all-reduce), then rank 0 takes one more step while rank 1 all-reduces its loss
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch.manual_seed(0)
        side = dist.new_group([0, 1], timeout=timedelta(seconds=30))
        model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4)))
        x = torch.ones(2, 64)
        for _ in range(3):
            model(x).sum().backward()
        with model.no_sync():
            model(x).sum().backward()
        if rank == 0:
            model(x).sum().backward()  # waits for a bucket all-reduce rank 1 never joins
        else:
            dist.barrier(group=side)  # waits for a barrier rank 0 never joins
    elif mode == "ddp_rebuild":
        # DDP syncs its rebuilt bucket order (C++ broadcasts) in the first forward after the
        # first backward: rank 1 is there while rank 0 all-reduces on another group
        from torch.nn.parallel import DistributedDataParallel as DDP

        dp = dist.new_group([0, 1], timeout=timedelta(seconds=30))
        model = DDP(torch.nn.Linear(8, 4), process_group=dp)
        x = torch.ones(2, 8)
        model(x).sum().backward()
        if rank == 0:
            dist.all_reduce(t)  # rank 1 never joins: it is in DDP's forward sync
        model(x).sum().backward()
    elif mode == "ddp_params":
        from torch.nn.parallel import DistributedDataParallel as DDP

        # a vocabulary built from each rank's own shard: the embedding sizes differ
        vocab = 30 if rank == 0 else 29
        model = DDP(torch.nn.EmbeddingBag(vocab, 4))
        model(torch.tensor([[1, 2]])).sum().backward()
    elif mode == "a2a_splits":
        # the receive counts are copied from the local send counts instead of exchanged:
        # right while every rank sends 2 rows to each, wrong when step 4's counts differ
        for step in range(6):
            send = [2, 2] if step != 4 else [1 + rank, 3 - rank]
            recv = torch.empty(sum(send), 4)
            dist.all_to_all_single(recv, torch.ones(sum(send), 4), list(send), send)
    elif mode == "p2psize":
        if rank == 0:
            dist.send(torch.ones(8), 1)
        else:
            dist.recv(torch.ones(4), 0)
    if rank == 0:  # one printer: two ranks writing one pipe at once can interleave
        # one write of the whole line: the ranks share one pipe
        sys.stdout.write(f"rank {rank} result {t.tolist()}\n")
        sys.stdout.flush()


def spawned(rank: int, port: int, mode: str) -> None:
    import commlint.guard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    commlint.guard.install(timeout=GUARD_TIMEOUT)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=30))
    body(mode)
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "--spawn":
        import socket

        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            free = s.getsockname()[1]
        mp.start_processes(spawned, args=(free, sys.argv[2]), nprocs=2, start_method="spawn")
    else:
        dist.init_process_group("gloo", timeout=timedelta(seconds=30))
        body(sys.argv[1])
        dist.destroy_process_group()
