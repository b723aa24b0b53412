"""A heartbeat thread that all-reduces, started on rank 0 only: its collective has no partner
on the other ranks, which wait in the barrier."""

import threading

import torch
import torch.distributed as dist


def heartbeat():
    alive = torch.ones(1)
    dist.all_reduce(alive)


def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        beat = threading.Thread(target=heartbeat)  # expect: CL101 CL112
        beat.start()
        beat.join()
    dist.barrier()


if __name__ == "__main__":
    main()
