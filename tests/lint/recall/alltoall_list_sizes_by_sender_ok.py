"""The fixed dispatch: receive buffer j is sized by what rank j sends."""

import torch
import torch.distributed as dist


def dispatch(rank: int, world: int) -> list[torch.Tensor]:
    send = [torch.full((rank + 1,), float(rank)) for _ in range(world)]
    recv = [torch.empty(j + 1) for j in range(world)]
    dist.all_to_all(recv, send)
    return recv


def main():
    dist.init_process_group("gloo")
    dispatch(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
