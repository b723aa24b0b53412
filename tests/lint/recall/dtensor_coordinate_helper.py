import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor


def export(weight, mesh, path):
    # every tp group gathers; only the first data-parallel replica writes
    full = weight.full_tensor()
    if mesh.get_coordinate()[0] == 0:
        torch.save(full, path)


def export_bad(weight, mesh, path):
    if mesh.get_coordinate()[1] == 0:
        full = weight.full_tensor()  # expect: CL115
        torch.save(full, path)


def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    w = distribute_tensor(torch.randn(8, 8), mesh["tp"], [Shard(0)])
    export(w, mesh, "w.pt")
    export_bad(w, mesh, "w.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
