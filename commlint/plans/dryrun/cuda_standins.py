"""The `torch.cuda` and `torch.accelerator` surface a GPU training script touches, answered
as one node of `local_world` H100-class GPUs, so the script runs unchanged on the CPU.

What is covered was taken from the sources of torchtitan 0.3.0, accelerate 1.12, Lightning
2.6, transformers 5.24, megatron-core 0.16.1 and deepspeed (every `torch.cuda.X`,
`torch.accelerator.X` and `device_module.X` they name, by count); docs/dryrun.md lists it.
Nothing here computes on a device: memory figures are 0 of 80 GiB used, random states are
the CPU generator's, CUDA graphs run their captured code once (a `replay()` runs nothing), and
`torch.compile` returns the function or module unchanged (eager), since the dry-run's fake
tensors never reach a compiler.

Streams, events and `synchronize` (which record the program's waits) stay in `child.py`; the
functions here take the `sync` callback that records a device synchronisation.
"""

from __future__ import annotations

import collections
import contextlib
import os
import types
from collections.abc import Callable
from typing import Any

import torch

from commlint.plans.dryrun import fingerprint

GIB = 1 << 30
TOTAL_MEMORY = 80 * GIB  # an 80 GB device
CAPABILITY = (9, 0)
NAME = "commlint dry-run (no GPU)"


def _index(device: Any, default: int) -> int:
    """A device index from what torch accepts: None, an int, "cuda", "cuda:1", a device."""
    if device is None:
        return default
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return default if device.index is None else device.index
    idx = getattr(device, "idx", None)
    return default if idx is None else int(idx)


def properties(local_rank: int) -> types.SimpleNamespace:
    """What `torch.cuda.get_device_properties` answers (the fields trainers read)."""
    major, minor = CAPABILITY
    return types.SimpleNamespace(
        name=NAME,
        major=major,
        minor=minor,
        total_memory=TOTAL_MEMORY,
        multi_processor_count=132,
        is_integrated=False,
        is_multi_gpu_board=False,
        max_threads_per_multi_processor=2048,
        max_threads_per_block=1024,
        warp_size=32,
        regs_per_multiprocessor=65536,
        shared_memory_per_block=49152,
        shared_memory_per_multiprocessor=233472,
        L2_cache_size=50 * (1 << 20),
        clock_rate=1_980_000,
        memory_clock_rate=2_619_000,
        memory_bus_width=5120,
        gcnArchName="",
        uuid=f"commlint-dryrun-{local_rank}",
        pci_bus_id=local_rank,
        pci_device_id=0,
        pci_domain_id=0,
    )


def memory_stats(device: Any = None) -> collections.defaultdict:
    """`torch.cuda.memory_stats`: every counter 0 (nothing is allocated on a device)."""
    return collections.defaultdict(int)


class _NoOpContext:
    """A context manager and decorator that does nothing (nvtx ranges, profiler, graphs)."""

    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def __enter__(self) -> _NoOpContext:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn


class CUDAGraph:
    """`torch.cuda.CUDAGraph`: the code under `capture` runs once, eagerly, and is recorded
    then; `replay()` runs nothing, so communication inside a graph is seen once."""

    def __init__(self, *a: Any, **k: Any) -> None:
        self._pool = object()

    def capture_begin(self, *a: Any, **k: Any) -> None:
        return None

    def capture_end(self) -> None:
        return None

    def replay(self) -> None:
        return None

    def reset(self) -> None:
        return None

    def pool(self) -> Any:
        return self._pool

    def enable_debug_mode(self) -> None:
        return None

    def debug_dump(self, path: str) -> None:
        return None


class MemPool:
    """`torch.cuda.MemPool`: an id and nothing allocated."""

    _next = 0

    def __init__(self, *a: Any, **k: Any) -> None:
        MemPool._next += 1
        self.id = (0, MemPool._next)

    def use_count(self) -> int:
        return 1

    def snapshot(self) -> list:
        return []


def compile_eagerly(model: Any = None, **kwargs: Any) -> Any:
    """`torch.compile` under the dry-run: the function or module itself (eager), in both the
    call form and the decorator form (`@torch.compile(mode=...)`)."""
    if model is None:
        return lambda fn: fn
    return model


def _autocast_on_cpu() -> None:
    """`torch.autocast("cuda", dtype=torch.float16)` (accelerate's and Lightning's mixed
    precision, `torch.cuda.amp.autocast`) casts the operations of tensors the dry-run keeps
    on the CPU: CPU autocast with the same dtype. Left on "cuda", it would cast nothing, and a
    half input would meet float weights (a dtype error a GPU run never has)."""
    autocast = torch.amp.autocast_mode.autocast
    init = autocast.__init__

    def on_cpu(self: Any, device_type: str, *a: Any, **k: Any) -> None:
        init(self, "cpu" if device_type == "cuda" else device_type, *a, **k)

    autocast.__init__ = on_cpu  # type: ignore[method-assign]


def compile_on_cpu() -> None:
    """`torch.compile` runs eagerly on a CPU target too: fake tensors never reach a compiler."""
    torch.compile = compile_eagerly
    torch.nn.Module.compile = lambda self, *a, **k: None


def install(local_rank: int, local_world: int, sync: Callable[[str], None]) -> None:
    """Replace the parts of `torch.cuda` / `torch.accelerator` / `torch.compile` listed in
    the module docstring."""
    cuda = torch.cuda
    current = [local_rank]

    class device:  # torch's own name: `isinstance(x, torch.cuda.device)` must hold
        """`torch.cuda.device(d)`: a context that selects nothing."""

        def __init__(self, device: Any) -> None:
            self.idx = _index(device, current[0])
            self.prev_idx = -1

        def __enter__(self) -> device:
            self.prev_idx = current[0]
            return self

        def __exit__(self, *exc: Any) -> bool:
            return False

    def set_device(d: Any) -> None:
        current[0] = _index(d, current[0])

    def current_device() -> int:
        return current[0]

    cpu_generator = torch.default_generator
    default_generators = tuple(torch.Generator() for _ in range(local_world))
    memory_info = (TOTAL_MEMORY, TOTAL_MEMORY)
    stubs: dict[str, Any] = {
        "device": device,
        "device_of": lambda obj: contextlib.nullcontext(),
        "set_device": set_device,
        "current_device": current_device,
        "get_device_properties": lambda device=None: properties(_index(device, current[0])),
        "get_device_capability": lambda device=None: CAPABILITY,
        "get_arch_list": lambda: ["sm_80", "sm_90"],
        "memory_stats": memory_stats,
        "memory_stats_as_nested_dict": lambda device=None: {},
        "memory_summary": lambda device=None, abbreviated=False: "(no device memory: dry-run)",
        "memory_snapshot": lambda *a, **k: [],
        "mem_get_info": lambda device=None: memory_info,
        "memory_cached": lambda device=None: 0,
        "max_memory_cached": lambda device=None: 0,
        "reset_max_memory_cached": lambda device=None: None,
        "reset_max_memory_allocated": lambda device=None: None,
        "reset_accumulated_memory_stats": lambda device=None: None,
        "set_per_process_memory_fraction": lambda fraction, device=None: None,
        "utilization": lambda device=None: 0,
        "temperature": lambda device=None: 0,
        "power_draw": lambda device=None: 0,
        "clock_rate": lambda device=None: 0,
        "get_rng_state": lambda device="cuda": cpu_generator.get_state(),
        # no CUDA generator: what the program gives it marks later draws (`fingerprint.py`)
        "set_rng_state": lambda new_state, device="cuda": fingerprint.cuda_seeded(new_state),
        "get_rng_state_all": lambda: [g.get_state() for g in default_generators],
        "set_rng_state_all": lambda new_states: fingerprint.cuda_seeded(new_states),
        "seed": lambda: fingerprint.cuda_seeded(("random", os.getpid())),
        "seed_all": lambda: fingerprint.cuda_seeded(("random", os.getpid())),
        "initial_seed": torch.initial_seed,
        "default_generators": default_generators,
        "CUDAGraph": CUDAGraph,
        "graph": _NoOpContext,
        "graph_pool_handle": lambda: object(),
        "make_graphed_callables": lambda callables, *a, **k: callables,
        "is_current_stream_capturing": lambda: False,
        "MemPool": MemPool,
        "use_mem_pool": lambda *a, **k: contextlib.nullcontext(),
        "set_stream": lambda stream: None,
        "_is_in_bad_fork": lambda: False,
        "_lazy_call": lambda fn, **k: None,
        "check_error": lambda res: None,
        "cudart": lambda: types.SimpleNamespace(
            cudaProfilerStart=lambda: 0, cudaProfilerStop=lambda: 0
        ),
    }
    for name, value in stubs.items():
        setattr(cuda, name, value)
    cuda.graphs.graph_pool_handle = stubs["graph_pool_handle"]
    with contextlib.suppress(AttributeError):
        cuda._graph_pool_handle = stubs["graph_pool_handle"]
    for name in ("get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all"):
        setattr(cuda.random, name, stubs[name])
    nvtx = cuda.nvtx
    nvtx.range_push = lambda msg: 0
    nvtx.range_pop = lambda: 0
    nvtx.range_start = lambda msg: 0
    nvtx.range_end = lambda range_id: None
    nvtx.mark = lambda msg: None
    nvtx.range = _NoOpContext
    cuda.profiler.start = lambda: None
    cuda.profiler.stop = lambda: None
    cuda.profiler.profile = _NoOpContext
    cuda.nccl.version = lambda: (2, 21, 5)

    acc = torch.accelerator
    accelerator: dict[str, Any] = {
        "is_available": lambda: True,
        "current_accelerator": lambda check_available=False: torch.device("cuda"),
        "device_count": lambda: local_world,
        "current_device_index": current_device,
        "current_device_idx": current_device,
        "set_device_index": set_device,
        "set_device_idx": set_device,
        "device_index": lambda d: contextlib.nullcontext(),
        "synchronize": lambda device=None: sync("accelerator.synchronize"),
        "current_stream": lambda device=None: cuda.current_stream(),
        "set_stream": lambda stream: None,
        "empty_cache": lambda: None,
        "empty_host_cache": lambda: None,
        "memory_stats": memory_stats,
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        "reset_peak_memory_stats": lambda device=None: None,
        "reset_accumulated_memory_stats": lambda device=None: None,
        "get_memory_info": lambda device=None: memory_info,
        "get_device_capability": lambda device=None: {
            "supported_dtypes": {
                torch.float32,
                torch.float16,
                torch.bfloat16,
                torch.float64,
                torch.int64,
                torch.int32,
                torch.int8,
                torch.uint8,
                torch.bool,
            }
        },
    }
    for name, value in accelerator.items():
        if hasattr(acc, name):
            setattr(acc, name, value)

    # the CUDA build's version strings and NCCL: torch's own checks (DDP's bf16 hook needs
    # "CUDA 11+ and NCCL 2.10+") and the frameworks' read these
    if torch.version.cuda is None:
        torch.version.cuda = "12.8"
    import torch.distributed as dist

    dist.is_nccl_available = lambda: True
    _autocast_on_cpu()
    compile_on_cpu()
