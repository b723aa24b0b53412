"""Broken: every rank seeds alike and builds the same data, but tests the mean of its own
rows (rank 0 the even ones, mean 0.496; rank 1 the odd ones, mean 0.504) to decide an extra
all_reduce: rank 1 all-reduces while rank 0 waits in the barrier. Past the real re-run
budget, the same seed does not make the tested number alike: it is made from rank-local rows
(CL211 at the test)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
data = torch.arange(128 * 64, dtype=torch.float32).reshape(128, 64) / 8192
mine = data[rank::world]
if mine.mean().item() > 0.5:  # rank-local rows decide
    dist.all_reduce(torch.ones(2))
dist.barrier()
dist.destroy_process_group()
