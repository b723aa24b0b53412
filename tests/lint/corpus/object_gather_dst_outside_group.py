"""Per-pair metrics gathered with gather_object(dst=0) on each pair's group: dst is a global
rank, and rank 0 is not in the pair [2, 3]. Run: torchrun --nproc-per-node 4"""

import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = pairs[rank // 2]
    out = [None, None] if rank % 2 == 0 else None
    dist.gather_object({"rank": rank}, out, dst=0, group=mine)  # expect: CL116


if __name__ == "__main__":
    main()
