"""Every rank calls dcp.save; only rank 0 prints."""

import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main():
    dist.init_process_group("gloo")
    model = torch.nn.Linear(8, 8)
    dcp.save({"model": model.state_dict()}, checkpoint_id=tempfile.mkdtemp())
    if dist.get_rank() == 0:
        print("saved")
    dist.barrier()


if __name__ == "__main__":
    main()
