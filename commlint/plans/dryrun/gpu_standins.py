"""Device stand-ins inside one simulated rank: the rank has no GPU, so tensors the program
puts on "cuda" stay on the CPU (`CudaOnCpu`), `torch.cuda` answers as the job's GPU would
(streams, events and synchronize become recorded syncs), and the libraries that check where
tensors are (FlexAttention, DeviceMesh, DTensor's RNG, checkpoints, `model.cuda()`) find
them where the real job would have them.

Installed by `child._install`; `_RECORDER` is the rank's `Recorder`, set by `child.run_rank`."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode

from commlint.plans.dryrun import devices, fingerprint, gpu_paths, unread
from commlint.plans.dryrun.recorder import Recorder


def _is_cuda(x: Any) -> bool:
    if isinstance(x, torch.device):
        return x.type == "cuda"
    return isinstance(x, str) and (x == "cuda" or x.startswith("cuda:"))


_DEVICE_TYPES = (str, torch.device)


def _indexed_cpu(x: Any) -> bool:
    if isinstance(x, torch.device):
        return x.type == "cpu" and x.index is not None
    return isinstance(x, str) and x.startswith("cpu:")


def _cpu(x: Any) -> Any:
    """A device argument as the dry-run passes it on: a GPU becomes the CPU, and so does
    `cpu:N` — the CPU torch gives every tensor made on `cpu:0` (accelerate's device on a CPU
    job), where a fake tensor would keep the index and then refuse to meet a `cpu` one
    (`FakeTensorDeviceMismatchError: cpu:0 and cpu`)."""
    return torch.device("cpu") if _is_cuda(x) or _indexed_cpu(x) else x


def no_gpu() -> None:
    """What a CPU-only machine says when a program asks for a GPU (`--device cpu`)."""
    torch.cuda._lazy_init()  # the CPU build's own: "Torch not compiled with CUDA enabled"
    raise RuntimeError("Found no NVIDIA driver on your system (--device cpu: no GPU)")


class CudaOnCpu(TorchFunctionMode):
    """Every tensor the script puts on a GPU stays on the CPU (or fake CPU) instead, and
    reports the GPU to the script (`devices`). On a CPU target (`--device cpu`, `gpus`
    False) a GPU asked for fails as it does on a machine without one."""

    gpus = True

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in devices.QUERIES:
            answer = devices.answer(func, args[0])
            return func(*args, **kwargs) if answer is NotImplemented else answer
        if func is torch.device:
            if self.gpus and len(args) == 1 and not kwargs and type(args[0]) is int:
                # `torch.device(0)`: index 0 of the current accelerator, which a GPU machine
                # has (FSDP's `device_id=local_rank`); the CPU build has none and raises
                return func("cuda", args[0])
            return func(*args, **kwargs)
        if func is torch.Tensor.cuda:
            if not self.gpus:
                no_gpu()
            device = args[1] if len(args) > 1 else kwargs.get("device")
            devices.mark(args[0], devices.named("cuda" if device is None else device))
            return args[0]
        if func is torch.Tensor.record_stream:
            return None
        if func is _PARSE_TO:
            # `module.to(device)`'s argument parser: what the program asked for (Lightning
            # keeps it as the module's `device`); the tensors it then moves stay on the CPU
            return func(*args, **kwargs)
        target: int | bool | None = False  # the device the call names (devices.named)
        if "device" in kwargs:
            device = kwargs["device"]
            target = devices.named(device)
            # `device=torch.cuda.current_device()` (an index: of the accelerator, Megatron's
            # pipeline buffers) is a GPU as much as "cuda" is
            kwargs["device"] = torch.device("cpu") if type(device) is int else _cpu(device)
        elif func is torch.Tensor.to and len(args) > 1 and type(args[1]) is int:
            target = args[1]
            args = (args[0], torch.device("cpu"), *args[2:])  # `x.to(local_rank)`
        elif func is torch.Tensor.cpu:
            target = None
        # Called for every torch function: rebuild the arguments only when one could name a
        # device (most calls pass tensors and numbers).
        named = [a for a in args if isinstance(a, _DEVICE_TYPES)]
        if named:
            if target is False:
                target = devices.named(named[0])
            args = tuple(_cpu(a) for a in args)
        if not self.gpus and target is not False and target is not None:
            no_gpu()
        out = devices.place(func, args, kwargs, func(*args, **kwargs), target)
        if func in unread.INTO_TENSOR:  # a number not computed made data: no value known
            caller = sys._getframe(1)
            while caller is not None and caller.f_code.co_filename.startswith(_LAYERS):
                caller = caller.f_back
            out = unread.into_tensor(func, args, kwargs, out, caller)
        if (target is False and func in devices.FACTORIES) or func is torch.Tensor.cpu:
            # (not `device=...` naming the CPU: a mesh's `device_type` is "cpu" here)
            devices.made_on_the_cpu(out, sys._getframe(1))
        return out


# Python layers between a torch function's caller and the mode: the dry-run's, torch's
_LAYERS = (unread.OWN_DIRS[1], torch.overrides.__file__)


_PARSE_TO = torch._C._nn._parse_to
_CUDA_ON_CPU = CudaOnCpu()


def _backward_sees_the_gpu() -> None:
    """Autograd runs hooks and custom backward functions (DeepSpeed's gradient hooks, DDP comm
    hooks, Megatron's autograd functions) inside `backward()`, a torch function call, during
    which CudaOnCpu is off the mode stack: with real tensors the engine runs with it back on.
    (Fake tensors need no such thing: the fake mode itself keeps GPU buffers on the CPU, and
    every torch function of a backward through a mode would cost a third of the run.)"""
    import torch.autograd.graph

    run = torch.autograd.graph._engine_run_backward

    def engine_run_backward(*a: Any, **k: Any) -> Any:
        with _CUDA_ON_CPU:
            return run(*a, **k)

    torch.autograd.graph._engine_run_backward = engine_run_backward
    torch.autograd._engine_run_backward = engine_run_backward


def _hooks_see_the_gpu() -> None:
    """With fake tensors, the fake mode keeps the GPU buffers made inside `backward()` on
    the CPU, but what the torch-function layer answers before dispatch is not there: a device
    given as an index (`torch.empty(n, device=torch.cuda.current_device())` in Megatron's
    custom backward, where the CPU build raises "Cannot access accelerator device"), a tensor
    asked for its device. So the custom backward functions and the gradient hooks the program
    registers run with the layer back on — only they, not every operation of the backward."""
    from torch.autograd.function import BackwardCFunction
    from torch.overrides import _get_current_function_mode_stack

    def on_cpu(fn: Any) -> Any:
        @functools.wraps(fn)
        def running(*a: Any, **k: Any) -> Any:
            if _CUDA_ON_CPU in _get_current_function_mode_stack():
                return fn(*a, **k)
            with _CUDA_ON_CPU:
                return fn(*a, **k)

        return running

    BackwardCFunction.apply = on_cpu(BackwardCFunction.apply)  # type: ignore[method-assign]
    for name in ("register_hook", "register_post_accumulate_grad_hook"):
        register = getattr(torch.Tensor, name)

        def registered(self: torch.Tensor, hook: Any, _register: Any = register) -> Any:
            return _register(self, on_cpu(hook))

        setattr(torch.Tensor, name, registered)


class _Event:
    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def record(self, stream: Any = None) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: Any) -> float:
        return 0.0

    def synchronize(self) -> None:
        _RECORDER.sync("cuda.Event.synchronize")


class _Stream(torch.Stream):
    """A CUDA stream: a `torch.Stream` (C++ argument parsing accepts it, as in
    `t.record_stream(torch.cuda.current_stream())`), each one itself only."""

    created = 0
    device = torch.device("cpu")
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __new__(cls, *a: Any, **k: Any) -> _Stream:
        return super().__new__(cls, device="cpu")

    def __init__(self, *a: Any, name: str | None = None, **k: Any) -> None:
        if name is None:
            _Stream.created += 1
            name = f"stream{_Stream.created}"
        self.name = name

    def wait_stream(self, other: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> _Event:
        return event or _Event()

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:  # torch.Stream's (the optimizer asks through accelerator)
        return False

    device_type = "cuda"
    device_index = 0
    stream_id = 0

    def synchronize(self) -> None:
        _RECORDER.sync("cuda.Stream.synchronize")

    def __enter__(self) -> _Stream:
        self._outer = _RECORDER.stream
        _RECORDER.stream = None if self.name == "default" else self.name
        return self

    def __exit__(self, *exc: Any) -> None:
        _RECORDER.stream = self._outer


# The rank's recorder: `child.run_rank` sets it before any stand-in is installed.
_RECORDER: Recorder = None  # type: ignore[assignment]


def _stub_cuda(local_rank: int, local_world: int) -> None:
    cuda = torch.cuda
    stream = _Stream(name="default")
    stubs = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "device_count": lambda: local_world,
        "synchronize": lambda device=None: _RECORDER.sync("cuda.synchronize"),
        "get_device_name": lambda device=None: "commlint dry-run (no GPU)",
        "get_device_capability": lambda device=None: (9, 0),
        "is_bf16_supported": lambda *a, **k: True,
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        "reset_peak_memory_stats": lambda device=None: None,
        "empty_cache": lambda: None,
        "manual_seed": fingerprint.cuda_seeded,
        "manual_seed_all": fingerprint.cuda_seeded,
        "Stream": _Stream,
        "Event": _Event,
        "stream": lambda s=None: s if isinstance(s, _Stream) else contextlib.nullcontext(s),
        "current_stream": lambda device=None: stream,
        "default_stream": lambda device=None: stream,
        "_lazy_init": lambda: None,
    }
    for name, fn in stubs.items():
        setattr(cuda, name, fn)
    # the rest of the surface trainers touch (device class, properties, memory, RNG, graphs,
    # nvtx, torch.accelerator, torch.compile → eager)
    from commlint.plans.dryrun import cuda_standins

    cuda_standins.install(local_rank, local_world, _RECORDER.sync)


def _flex_attention_on_cpu() -> None:
    """FlexAttention refuses a backward pass on the CPU (its kernels are GPU ones); the
    program's tensors are on the CPU only because the dry-run keeps them there, and fake
    tensors run its backward's shape rules, not its kernels (torchtitan's llama3)."""
    with contextlib.suppress(ImportError):
        from torch.nn.attention import flex_attention as flex

        validate = flex._validate_device

        def on_gpu(query: Any, key: Any, value: Any) -> None:
            if query.device.type == "cpu" and isinstance(query, FakeTensor):
                return
            validate(query, key, value)

        flex._validate_device = on_gpu


def _meshes_on_cpu() -> None:
    """A "cuda" DeviceMesh becomes a "cpu" one, so DTensor/FSDP find their tensors where
    the mesh says they are."""
    with contextlib.suppress(ImportError):
        import torch.distributed.device_mesh as dm

        mesh_init = dm.DeviceMesh.__init__

        def on_cpu(device_type: str) -> str:
            if not _is_cuda(device_type):
                return device_type
            gpu_paths.gpu_meshes = True
            return "cpu"

        def mesh_on_cpu(self: Any, device_type: str, *a: Any, **k: Any) -> None:
            mesh_init(self, on_cpu(device_type), *a, **k)

        dm.DeviceMesh.__init__ = mesh_on_cpu
        init_mesh = dm.init_device_mesh

        def init_device_mesh(device_type: str, *a: Any, **k: Any) -> Any:
            return init_mesh(on_cpu(device_type), *a, **k)

        dm.init_device_mesh = init_device_mesh
        # A deep copy of a mesh (inside a deep-copied model) names the same groups; copying
        # its rank tensor under fake tensors fails, and its groups hold the rank's plumbing.
        dm.DeviceMesh.__deepcopy__ = lambda self, memo: self


def _dtensor_rng_as_on_gpus() -> None:
    """DTensor's first random op on a GPU mesh (`init.normal_` of a sharded weight) makes
    torch's RNG tracker, which broadcasts rank 0's GPU RNG state over the default group
    (not when the program made the tracker without that sync). Here the mesh is a "cpu"
    one, where DTensor makes no tracker, and the broadcast was missing from the trace. A
    program that asked for GPU meshes gets a tracker that makes it; the random values stay
    the fake tensors' (none)."""
    with contextlib.suppress(ImportError):
        from torch.distributed.tensor import _dispatch
        from torch.distributed.tensor import _random as rng

        supported, tracker = rng.is_rng_supported_mesh, rng.OffsetBasedRNGTracker

        def asked_for_gpus(mesh: Any) -> bool:
            return gpu_paths.gpu_meshes and mesh.device_type == "cpu"

        def is_rng_supported_mesh(mesh: Any) -> bool:
            return asked_for_gpus(mesh) or supported(mesh)

        lazily = _dispatch.OpDispatcher._dispatch_get_local_results_slow_path.__code__

        class GpuMeshRNGTracker(tracker):
            def __init__(self, device_mesh: Any, run_state_sync: bool = True) -> None:
                if not asked_for_gpus(device_mesh):
                    super().__init__(device_mesh, run_state_sync)
                    return
                # made lazily by a random op: DTensor syncs unless it is being traced, and
                # the dry-run's fake tensors look like tracing to it (a real run does not)
                run_state_sync = run_state_sync or sys._getframe(1).f_code is lazily
                self._device = torch.device("cuda", torch.cuda.current_device())
                self._device_handle = torch.cuda
                self._use_distribute_region = True
                if run_state_sync:  # rank 0's Philox state (seed, offset): 16 bytes
                    state = torch.empty(16, dtype=torch.uint8, device=self._device)
                    torch.distributed.broadcast(state, 0)

            @contextlib.contextmanager
            def _distribute_region(self, spec: Any, generator: Any = None) -> Iterator[None]:
                yield

        rng.is_rng_supported_mesh = _dispatch.is_rng_supported_mesh = is_rng_supported_mesh
        rng.OffsetBasedRNGTracker = GpuMeshRNGTracker


def _checkpoints_load_on_cpu() -> None:
    """`torch.load(f, map_location="cuda:N")` (or a device, a dict naming GPUs, a function
    that calls `storage.cuda()`) loads on the CPU; tensors loaded for a GPU report it."""
    load = torch.load

    def load_on_cpu(*a: Any, **k: Any) -> Any:
        where = k.get("map_location", a[1] if len(a) > 1 else None)
        gpu: int | bool | None = None
        if callable(where):
            where = "cpu"
        elif isinstance(where, dict):
            where = {key: _cpu(value) for key, value in where.items()}
        elif where is not None:
            gpu = devices.named(where)
            where = _cpu(torch.device(where) if type(where) is int else where)
        if len(a) > 1:
            a = (a[0], where, *a[2:])
        elif where is not None:
            k["map_location"] = where
        loaded = load(*a, **k)
        if type(gpu) is int:
            from torch.utils import _pytree as pytree

            for t in pytree.tree_leaves(loaded):
                devices.mark(t, gpu)
        return loaded

    torch.load = load_on_cpu


def _modules_stay_on_cpu() -> None:
    """`model.cuda()` / `model.to("cuda")` leave the module where it is (no copy, no swap of
    fake parameters); a dtype change still applies."""
    module = torch.nn.Module
    to = module.to

    def on_gpu(self: Any, device: Any) -> Any:
        if not _CUDA_ON_CPU.gpus:
            no_gpu()
        idx = devices.named(device)
        for t in (*self.parameters(), *self.buffers()):
            devices.mark(t, idx)
        return self

    def module_to(self: Any, *a: Any, **k: Any) -> Any:
        gpu = [x for x in (*a, k.get("device")) if _is_cuda(x) or type(x) is int]
        if not gpu:
            return to(self, *a, **k)
        a = tuple(x for x in a if x is not gpu[0])
        k.pop("device", None)
        k.pop("non_blocking", None)
        return on_gpu(to(self, *a, **k) if a or k else self, gpu[0])

    module.to = module_to
    module.cuda = lambda self, device=None: on_gpu(self, "cuda" if device is None else device)
    apply = module._apply

    def apply_without_swap(self: Any, fn: Any, recurse: bool = True) -> Any:
        # torch swaps fake parameters instead of assigning `.data`, and the swap fails when
        # the fake tensor is referenced weakly (always, inside FakeTensorMode).
        try:
            return apply(self, fn, recurse)
        except RuntimeError as exc:
            if "Couldn't swap" not in str(exc):
                raise
        for m in self.modules() if recurse else [self]:
            for p in m._parameters.values():
                if p is not None:
                    with torch.no_grad():
                        new = fn(p)
                    if new is not p:
                        p.data = new
            for key, b in m._buffers.items():
                if b is not None:
                    m._buffers[key] = fn(b)
        return self

    module._apply = apply_without_swap
