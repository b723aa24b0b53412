import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dtype = torch.float32 if rank % 2 else torch.bfloat16
    t = torch.zeros(8, dtype=dtype)
    dist.all_reduce(t)

if __name__ == "__main__":
    main()
