# torch's ddp_under_dist_autograd_test: one role per rank, launched with
# torchrun --nproc-per-node 4; an unknown rank raises (a crash, not a hang)
import torch.distributed as dist


def master():
    dist.init_process_group("gloo")
    dist.new_group([2, 3])


def worker():
    dist.init_process_group("gloo")
    dist.new_group([2, 3])


def main(rank):
    if rank == 0:
        master()
    elif rank == 1:
        worker()
    elif rank in (2, 3):
        worker()
    else:
        raise RuntimeError(f"unknown rank {rank}")


if __name__ == "__main__":
    main(dist.get_rank())
