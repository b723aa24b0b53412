import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor


def main():
    dist.init_process_group("gloo")
    world_mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp_mesh = world_mesh["tp"]
    w = distribute_tensor(torch.randn(8, 8), tp_mesh, [Shard(0)])
    if tp_mesh.get_local_rank() == 0:
        print(w.full_tensor().sum())  # expect: CL101
    local = torch.ones(4, 8)
    d = DTensor.from_local(local, device_mesh=tp_mesh, placements=[Shard(0)])
    if world_mesh.get_local_rank("tp") == 0:
        d = d.redistribute(tp_mesh, [Replicate()])  # expect: CL101
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
