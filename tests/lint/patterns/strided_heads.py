import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    heads = list(range(5))
    for head in heads[rank::world]:
        dist.all_reduce(torch.zeros(2))

if __name__ == "__main__":
    main()
