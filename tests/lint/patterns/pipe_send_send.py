import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.zeros(4)
    y = torch.zeros(4)
    if rank < world - 1:
        dist.send(x, rank + 1)
    if rank > 0:
        dist.send(y, rank - 1)
    if rank > 0:
        dist.recv(x, rank - 1)
    if rank < world - 1:
        dist.recv(y, rank + 1)

if __name__ == "__main__":
    main()
