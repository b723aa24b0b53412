import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        req = dist.isend(torch.zeros(2), dst=1)
        req.wait()
    elif rank == 1:
        req = dist.irecv(torch.zeros(2), src=2)
        req.wait()

if __name__ == "__main__":
    main()
