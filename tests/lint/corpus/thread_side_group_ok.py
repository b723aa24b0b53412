"""Every rank runs the heartbeat thread on its own group and joins it before the main thread
communicates again: one order on every rank."""

import threading

import torch
import torch.distributed as dist


def heartbeat(group):
    for _ in range(3):
        dist.all_reduce(torch.ones(1), group=group)


def main():
    dist.init_process_group("gloo")
    side = dist.new_group(backend="gloo")
    beat = threading.Thread(target=heartbeat, args=(side,))  # expect: CL112
    beat.start()
    beat.join()
    dist.barrier()


if __name__ == "__main__":
    main()
