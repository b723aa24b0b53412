"""Warming up the parent before ranks are forked: torch's modules imported, fake tensors'
decompositions and DTensor/FSDP2's first-call costs paid once, so every forked rank starts
warm (moved out of `driver.py`)."""

from __future__ import annotations

import contextlib
import warnings

from commlint.plans.dryrun.child import real_tensors


def warm_up(mode: str = "fake") -> None:
    """Import in the parent what every rank needs, so each forked child starts warm."""
    import importlib

    for name in (
        "torch.distributed",
        "torch.nn.parallel",
        "torch.distributed.device_mesh",
        "torch.distributed.tensor",
        "torch.distributed.tensor.parallel",
        "torch.distributed.fsdp",
        "torch.distributed.pipelining",
        "torch.distributed._functional_collectives",
        "torch.optim",
        # imported by the first data-dependent size; under the CUDA stand-ins (a
        # `torch.version.cuda`) its import warns that triton is missing, into the program's output
        "torch.utils.flop_counter",
    ):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if mode == "fake" and not _WARM:
        _warm_fake_tensors()
        with contextlib.suppress(Exception):
            _warm_distributed()
        _WARM.append(True)


_WARM: list[bool] = []


def _warm_fake_tensors() -> None:
    """The first operations under fake tensors load torch's decompositions and meta kernels
    (~5 s); do it once here (once per process) so no forked rank pays for it."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    shape_env = ShapeEnv(allow_scalar_outputs=False)
    with FakeTensorMode(allow_non_fake_inputs=True, shape_env=shape_env, static_shapes=True):
        (torch.randn(8) > 0).nonzero().sum()  # a data-dependent size: sympy's first use
        emb = nn.Embedding(16, 8)
        layer = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8), nn.GELU(), nn.Dropout(0.1))
        idx = torch.randint(0, 16, (2, 4))
        x = layer(emb(idx))
        q = x.view(2, 4, 2, 4).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(2, 4, 8)
        loss = F.cross_entropy(a.reshape(-1, 8), idx.view(-1) % 8) + F.mse_loss(x, a)
        loss.backward()
        torch.optim.AdamW(layer.parameters()).step()


def _warm_distributed() -> None:
    """One tiny tensor-parallel + FSDP2 step on fake tensors, in a fake 4-rank world (torch's
    `fake` process group: no communication), so no forked rank pays DTensor's and FSDP2's
    first-call costs (~10 % of a TP×FSDP rank). Nothing of it stays: the world is destroyed
    and DTensor's random-number tracker, set by the first sharded module, is reset."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import _random
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        return
    mesh_init = DeviceMesh.__init__
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    DeviceMesh.__init__ = real_tensors(mesh_init)  # as in a rank: the mesh needs values
    try:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        with FakeTensorMode(allow_non_fake_inputs=True), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
            parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
            fully_shard(model, mesh=mesh["dp"])
            model(torch.randn(2, 8)).sum().backward()
    finally:
        DeviceMesh.__init__ = mesh_init
        dist.destroy_process_group()
        _random._rng_tracker = None
