"""A job with tensor-parallel pairs saves one distributed checkpoint over the whole job: the
default group is meant (no CL105)."""

import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = None
    for start in range(0, world, 2):
        g = dist.new_group([start, start + 1])
        if rank in (start, start + 1):
            tp = g
    weight = torch.ones(4)
    dist.all_reduce(weight, group=tp)
    dcp.save({"weight": weight}, checkpoint_id=tempfile.mkdtemp())


if __name__ == "__main__":
    main()
