import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    w = distribute_tensor(torch.randn(8, 8), mesh, [Replicate(), Shard(0)])
    if mesh["dp"].get_local_rank() == 0:
        print(w.full_tensor().sum())  # gathers over tp only: fine
    if mesh["tp"].get_local_rank() == 0:
        print(w.full_tensor().sum())  # expect: CL101
    r = w.redistribute(mesh, [Replicate(), Replicate()])
    if mesh["tp"].get_local_rank() == 0:
        r.full_tensor()  # replicated everywhere: no communication
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
