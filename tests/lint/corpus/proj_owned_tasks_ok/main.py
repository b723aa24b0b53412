import argparse

import torch.distributed as dist

from ownership import TaskBank


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--local_rank", type=int, default=0)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    bank = TaskBank(args.tasks)
    bank.norms()
    dist.barrier()


if __name__ == "__main__":
    main()
