"""torch's GPU-only paths, run on the CPU as the GPU job runs them.

- **SyncBatchNorm**: its five statistics kernels exist only for CUDA. The dry-run registers CPU
  and meta kernels for them (the same formulas: per-channel mean and inverse standard
  deviation, their count-weighted combination across ranks, the running-stat update with the
  unbiased variance, normalisation, and the two-part backward), so torch's own SyncBatchNorm
  runs unchanged and issues its own collectives: an all-gather of each layer's statistics in
  the forward and an all-reduce of its gradient sums in the backward. DDP's refusal of
  SyncBatchNorm in a CPU module does not apply (the module is on a GPU in the job); the
  layer's own check that its input is on a GPU sees where the program put the input
  (`devices`).
- **FSDP1 without `device_id`** on a module the program moved to the GPU (`FSDP(model.cuda())`)
  or left on the CPU takes the current GPU, as on a GPU machine; `sync_module_states=True`
  checks where the program put the parameters (`devices`), not where the dry-run keeps them.
- **DTensor's shard-to-shard redistribution** on a mesh the program made on `cuda` is the
  all-to-all the GPU job issues, not the all-gather torch falls back to on a CPU mesh.
- **Attention on DTensors** (`F.scaled_dot_product_attention` under tensor parallelism) runs
  the CPU's flash kernel here, given the sharding rules of the GPU's.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from commlint.plans.dryrun import devices

gpu_meshes = False  # the program made a DeviceMesh on "cuda" (child._meshes_on_cpu)


def _acc(dtype: torch.dtype) -> torch.dtype:
    """The dtype CUDA's batch-norm statistics are kept in."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _reduced(x: torch.Tensor) -> list[int]:
    return [d for d in range(x.dim()) if d != 1]


def _per_channel(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return v.reshape(1, -1, *([1] * (like.dim() - 2)))


def batch_norm_stats(input: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    var, mean = torch.var_mean(input.to(_acc(input.dtype)), dim=_reduced(input), correction=0)
    return mean, torch.rsqrt(var + eps)


def batch_norm_gather_stats_with_counts(
    input: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    momentum: float,
    eps: float,
    counts: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    weights = counts.to(mean.dtype).unsqueeze(1)
    total = weights.sum()
    global_mean = (mean * weights).sum(0) / total
    spread = invstd.pow(-2) - eps + (mean - global_mean).square()
    global_var = (spread * weights).sum(0) / total
    with torch.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * global_mean.to(running_mean.dtype))
        if running_var is not None:
            unbiased = global_var * total / (total - 1)
            running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
    return global_mean, torch.rsqrt(global_var + eps)


def batch_norm_elemt(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    out = (input - _per_channel(mean, input)) * _per_channel(invstd, input)
    if weight is not None:
        out = out * _per_channel(weight, input)
    if bias is not None:
        out = out + _per_channel(bias, input)
    return out.to(input.dtype)


def batch_norm_backward_reduce(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    weight: torch.Tensor | None,
    input_g: bool,
    weight_g: bool,
    bias_g: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dy = grad_out.to(mean.dtype)
    sum_dy = dy.sum(_reduced(input))
    sum_dy_xmu = (dy * (input.to(mean.dtype) - _per_channel(mean, input))).sum(_reduced(input))
    if weight is None:
        return sum_dy, sum_dy_xmu, sum_dy.new_empty(0), sum_dy.new_empty(0)
    return sum_dy, sum_dy_xmu, (sum_dy_xmu * invstd).to(weight.dtype), sum_dy.to(weight.dtype)


def batch_norm_backward_elemt(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    mean: torch.Tensor,
    invstd: torch.Tensor,
    weight: torch.Tensor | None,
    sum_dy: torch.Tensor,
    sum_dy_xmu: torch.Tensor,
    count: torch.Tensor,
) -> torch.Tensor:
    total = count.sum().to(mean.dtype)
    scale = invstd if weight is None else invstd * weight.to(mean.dtype)
    centred = input.to(mean.dtype) - _per_channel(mean, input)
    grad = (
        grad_out.to(mean.dtype)
        - _per_channel(sum_dy / total, input)
        - centred * _per_channel(invstd.square() * sum_dy_xmu / total, input)
    )
    return (grad * _per_channel(scale, input)).to(input.dtype)


def _channel_stats(input: torch.Tensor, *a: Any) -> tuple[torch.Tensor, torch.Tensor]:
    c = input.new_empty(input.size(1), dtype=_acc(input.dtype))
    return c, c.clone()


def _gathered_stats(input: torch.Tensor, mean: torch.Tensor, *a: Any) -> tuple[Any, Any]:
    c = mean.new_empty(mean.size(1))
    return c, c.clone()


def _like_input(grad_or_input: torch.Tensor, input: torch.Tensor, *a: Any) -> torch.Tensor:
    return torch.empty_like(input)


def _reduced_grads(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    mean: torch.Tensor,
    invstd: Any,
    weight: Any,
    *a: Any,
) -> tuple[torch.Tensor, ...]:
    c = mean.new_empty(input.size(1))
    w = c.new_empty(0) if weight is None else c.to(weight.dtype)
    return c, c.clone(), w, w.clone()


# CPU kernel (the GPU's arithmetic) and meta kernel (shapes and dtypes only: a count of
# ranks with data is a data-dependent size there)
_KERNELS = {
    "batch_norm_stats": (batch_norm_stats, _channel_stats),
    "batch_norm_gather_stats_with_counts": (batch_norm_gather_stats_with_counts, _gathered_stats),
    "batch_norm_elemt": (batch_norm_elemt, lambda input, *a: torch.empty_like(input)),
    "batch_norm_backward_reduce": (batch_norm_backward_reduce, _reduced_grads),
    "batch_norm_backward_elemt": (batch_norm_backward_elemt, _like_input),
}
_LIBRARIES: list[Any] = []  # a Library's kernels live as long as the object


def register_sync_batch_norm_kernels() -> None:
    """CPU and meta kernels for SyncBatchNorm's CUDA-only operators (in this process)."""
    lib = torch.library.Library("aten", "IMPL")
    for name, (cpu, meta) in _KERNELS.items():
        lib.impl(name, cpu, "CPU")
        lib.impl(name, meta, "Meta")
    _LIBRARIES.append(lib)


def _sync_batch_norm() -> None:
    register_sync_batch_norm_kernels()
    from torch.nn.parallel import DistributedDataParallel as DDP

    DDP._passing_sync_batchnorm_handle = lambda self, module: None


def _fsdp1() -> None:
    """FSDP1 (`FullyShardedDataParallel`, Lightning's "fsdp") computes on the CPU where its
    `device_id` names a GPU (and checks before the first forward that its flat parameters are
    there); without `device_id` it takes the current GPU; `sync_module_states` checks where
    the program put the parameters."""
    with contextlib.suppress(ImportError):
        from torch.distributed.fsdp import _init_utils
        from torch.distributed.fsdp import fully_sharded_data_parallel as fsdp

        compute_device = _init_utils._get_compute_device

        def on_cpu(*a: Any, **k: Any) -> torch.device:
            device = compute_device(*a, **k)
            return torch.device("cpu") if device.type == "cuda" else device

        _init_utils._get_compute_device = on_cpu
        init_handle = _init_utils._init_device_handle

        def current_gpu(state: Any, module: Any, ignored: Any, device_id: Any) -> Any:
            if device_id is None:  # a GPU machine's current accelerator
                device_id = torch.device("cuda", torch.cuda.current_device())
            return init_handle(state, module, ignored, device_id)

        _init_utils._init_device_handle = fsdp._init_device_handle = current_gpu

        def where_the_program_put_them(states: list[torch.Tensor]) -> None:
            if any(devices.index(t) is None for t in states):
                raise ValueError(
                    "The module has CPU parameters or buffers when `sync_module_states=True`, "
                    "which requires them to be on GPU. Please specify the `device_id` argument "
                    "or move the module to GPU before passing it to FSDP."
                )

        _init_utils._check_module_states_for_sync_module_states = where_the_program_put_them


def _dtensor_all_to_all() -> None:
    with contextlib.suppress(ImportError):
        from torch.distributed import _functional_collectives as funcol
        from torch.distributed.tensor import _collective_utils, placement_types

        fallback = _collective_utils.shard_dim_alltoall

        def shard_dim_alltoall(
            input: torch.Tensor, gather_dim: int, shard_dim: int, mesh: Any, mesh_dim: int
        ) -> torch.Tensor:
            parts = mesh.size(mesh_dim)
            if not gpu_meshes or input.size(shard_dim) % parts:
                return fallback(input, gather_dim, shard_dim, mesh, mesh_dim)
            # chunk i of the shard dimension goes to rank i; what comes back from rank r
            # is its piece of the gather dimension
            sent = input.movedim(shard_dim, 0).contiguous()
            got = funcol.all_to_all_single(sent, None, None, (mesh, mesh_dim))
            if isinstance(got, funcol.AsyncCollectiveTensor):
                got = got.wait()
            pieces = [p.movedim(0, shard_dim) for p in got.chunk(parts, dim=0)]
            return torch.cat(pieces, dim=gather_dim).contiguous()

        _collective_utils.shard_dim_alltoall = shard_dim_alltoall
        placement_types.shard_dim_alltoall = shard_dim_alltoall


def _dtensor_cpu_attention() -> None:
    """Attention on DTensors picks the CPU's flash kernel here, which has no sharding rule:
    the rules of the GPU's flash kernel (replicated, heads sharded as in tensor parallelism,
    batch sharded), for its outputs and inputs."""
    with contextlib.suppress(ImportError, AttributeError):
        from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
        from torch.distributed.tensor._ops.utils import (
            expand_to_full_mesh_op_strategy,
            register_op_strategy,
        )
        from torch.distributed.tensor.placement_types import Replicate, Shard

        aten = torch.ops.aten

        def rules(tensors: int) -> list[list[Any]]:
            return [[kind] * tensors for kind in (Replicate(), Shard(1), Shard(0))]

        forward = aten._scaled_dot_product_flash_attention_for_cpu.default
        backward = aten._scaled_dot_product_flash_attention_for_cpu_backward.default

        @register_op_strategy(forward, schema_info=RuntimeSchemaInfo(3))
        def attention(op_schema: Any) -> Any:
            # output, logsumexp; query, key, value
            mesh = op_schema.get_mesh_from_args()
            return expand_to_full_mesh_op_strategy(mesh, op_schema, rules(5), input_index=2)

        @register_op_strategy(backward, schema_info=RuntimeSchemaInfo(6))
        def attention_backward(op_schema: Any) -> Any:
            # grad query, key, value; grad output, query, key, value, output, logsumexp
            mesh = op_schema.get_mesh_from_args()
            return expand_to_full_mesh_op_strategy(mesh, op_schema, rules(9), input_index=3)


def install() -> None:
    _sync_batch_norm()
    _fsdp1()
    _dtensor_all_to_all()
    _dtensor_cpu_attention()
