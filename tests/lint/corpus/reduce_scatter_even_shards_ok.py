"""Every rank's chunk is the padded size: the shards agree."""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    numel = 37
    chunk = (numel + world - 1) // world
    grads = torch.ones(chunk * world)
    mine = torch.empty(chunk)
    dist.reduce_scatter_tensor(mine, grads)


if __name__ == "__main__":
    main()
