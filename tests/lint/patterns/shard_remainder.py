import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    docs = list(range(13))
    per = (len(docs) + world - 1) // world
    mine = docs[rank * per : (rank + 1) * per]
    g = torch.zeros(4)
    for i in range(0, len(mine), 1):
        dist.all_reduce(g)

if __name__ == "__main__":
    main()
