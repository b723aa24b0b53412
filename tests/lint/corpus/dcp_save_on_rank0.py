"""torch.distributed.checkpoint.save is a collective (plans are gathered on the coordinator):
called on rank 0 only, it waits for ranks that are already in the barrier."""

import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main():
    dist.init_process_group("gloo")
    model = torch.nn.Linear(8, 8)
    if dist.get_rank() == 0:
        dcp.save({"model": model.state_dict()}, checkpoint_id=tempfile.mkdtemp())  # expect: CL101
    dist.barrier()


if __name__ == "__main__":
    main()
