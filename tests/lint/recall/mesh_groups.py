import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    tp_group = mesh.get_group("tp")
    dp_rank = mesh.get_local_rank("dp")
    stats = torch.zeros(4)
    if dp_rank == 0:  # every member of each tp group has the same dp coordinate
        dist.all_reduce(stats, group=tp_group)
    if mesh["tp"].get_local_rank() < 2:  # every member of each dp group, the same tp one
        dist.all_reduce(stats, group=mesh["dp"].get_group())
    if dp_rank == 1:
        dist.all_reduce(stats, group=mesh["dp"].get_group())  # expect: CL101
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
