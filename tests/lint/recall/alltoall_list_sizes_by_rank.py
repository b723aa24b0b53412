"""Expert dispatch with per-peer tensor lists: each rank sends a chunk sized by its own rank,
but sizes its receive buffers by its own rank too, not by the sender's."""

import torch
import torch.distributed as dist


def dispatch(rank: int, world: int) -> list[torch.Tensor]:
    send = [torch.full((rank + 1,), float(rank)) for _ in range(world)]
    recv = [torch.empty(rank + 1) for _ in range(world)]
    dist.all_to_all(recv, send)  # expect: CL116
    return recv


def main():
    dist.init_process_group("gloo")
    dispatch(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
