"""The fix: name the destination within the group (group_dst=0). Run: torchrun --nproc-per-node 4"""

import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = pairs[rank // 2]
    out = [None, None] if rank % 2 == 0 else None
    dist.gather_object({"rank": rank}, out, group=mine, group_dst=0)
    dist.barrier()  # rank 0 hosts the store: nobody leaves before everyone is done


if __name__ == "__main__":
    main()
