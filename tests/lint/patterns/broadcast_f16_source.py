import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
weights = torch.zeros(8)
if rank == 0:
    buf = weights.to(torch.float16)
else:
    buf = torch.empty(8, dtype=torch.float32)
dist.broadcast(buf, src=0)
