import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Shard, distribute_tensor


def save_full(weight, path):
    if dist.get_rank() == 0:
        torch.save(weight.full_tensor(), path)  # expect: CL101


def step(model, x, tp_rank):
    if tp_rank == 0:
        model(x).sum().backward()


def main(cfg):
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    w = distribute_tensor(torch.randn(8, 8), mesh["tp"], [Shard(0)])
    save_full(w, cfg.path)
    model = torch.nn.Linear(8, 8)
    fully_shard(model, mesh=mesh["dp"])
    step(model, torch.randn(2, 8), mesh["tp"].get_local_rank())
    dist.destroy_process_group()
