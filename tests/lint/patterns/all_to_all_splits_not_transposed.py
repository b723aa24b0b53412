import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.zeros(4)
if rank == 0:
    in_splits, out_splits = [3, 1], [3, 2]
else:
    in_splits, out_splits = [1, 3], [1, 3]
out = torch.empty(sum(out_splits))
dist.all_to_all_single(out, x, out_splits, in_splits)
