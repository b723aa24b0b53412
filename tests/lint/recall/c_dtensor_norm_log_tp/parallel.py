"""2-D parallelism: data parallel x tensor parallel on one DeviceMesh."""
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor


def build_mesh(dp, tp):
    return init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))


class ShardedLinear(torch.nn.Module):
    """A column-parallel linear layer: its weight is sharded over the mesh's tp dimension."""

    def __init__(self, mesh, d_in, d_out):
        super().__init__()
        self.tp_mesh = mesh["tp"]
        w = torch.randn(d_out, d_in)
        self.weight = torch.nn.Parameter(distribute_tensor(w, self.tp_mesh, [Shard(0)]))

    def forward(self, x):
        return x @ self.weight.to_local().t()
