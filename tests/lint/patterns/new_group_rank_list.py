import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = dist.new_group(ranks=[rank, (rank + 1) % world])
    dist.all_reduce(torch.zeros(2), group=g)

if __name__ == "__main__":
    main()
