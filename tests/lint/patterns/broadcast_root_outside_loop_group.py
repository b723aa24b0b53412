import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tp_group = None
    for start in range(0, world, 2):
        g = dist.new_group(list(range(start, start + 2)))
        if rank in range(start, start + 2):
            tp_group = g
    dist.broadcast(torch.zeros(2), src=0, group=tp_group)

if __name__ == "__main__":
    main()
