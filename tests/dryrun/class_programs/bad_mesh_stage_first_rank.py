"""A 4 x 2 x 2 mesh (pp, dp, tp) from init_device_mesh; the first rank of stage 2 alone issues
one more all-reduce on its tp group. Rank classes carry the mesh's coordinates and groups as
rank expressions."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (4, 2, 2), mesh_dim_names=("pp", "dp", "tp"))
pp, dp, tp = (mesh.get_local_rank(d) for d in ("pp", "dp", "tp"))
x = torch.empty(2048)
dist.all_reduce(x, group=mesh.get_group("tp"))
dist.all_reduce(x, group=mesh["dp"].get_group())
if pp > 0:
    dist.recv(x, src=dist.get_rank() - 4)
if pp < 3:
    dist.send(x, dst=dist.get_rank() + 4)
if tp == 0 and dp == 0 and pp == 2:
    dist.all_reduce(x, group=mesh.get_group("tp"))
dist.all_reduce(x, group=mesh.get_group("pp"))
dist.destroy_process_group()
