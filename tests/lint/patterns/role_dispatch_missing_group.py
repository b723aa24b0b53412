# torch's ddp_under_dist_autograd_test: one role per rank, launched with
# torchrun --nproc-per-node 4; the trainers do not create the group the others create
import torch.distributed as dist


def master():
    dist.init_process_group("gloo")
    dist.new_group([2, 3])


def trainer():  # forgets the group the other roles create
    dist.init_process_group("gloo")


def worker():
    dist.init_process_group("gloo")
    dist.new_group([2, 3])


def main(rank):
    if rank == 0:
        master()
    elif rank == 1:
        worker()
    elif rank in (2, 3):
        trainer()
    else:
        raise RuntimeError(f"unknown rank {rank}")


if __name__ == "__main__":
    main(dist.get_rank())
