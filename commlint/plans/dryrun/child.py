"""One simulated rank in a forked process: torchrun's environment, no GPU, the user's script.

Patches are installed here, after the fork, so the parent stays clean. The rank streams its
actions to the parent as it goes, so a rank that is killed still leaves its trace behind.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import io
import os
import re
import resource
import runpy
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.overrides import TorchFunctionMode

from commlint.plans.dryrun import devices, executed, fingerprint, gpu_paths, missing_api, unread
from commlint.plans.dryrun import recorder as rec_mod
from commlint.plans.dryrun.causes import FAKE_LIMITS, own
from commlint.plans.dryrun.channel import Live, PipeSend
from commlint.plans.dryrun.files import FileView
from commlint.plans.dryrun.overlay import enter_private_root
from commlint.plans.dryrun.procs import SESSION_MARKER, STOP_MESSAGES, STOP_SIGNALS
from commlint.plans.dryrun.recorder import (
    BACKEND,
    SMALL_REAL,
    Recorder,
    RecordingFakeTensorMode,
    StopRank,
    is_user_file,
    know,
    make_backend,
    short_path,
    user_site,
)
from commlint.plans.dryrun.unread import RAISED as _RAISED
from commlint.plans.dryrun.values import ValueTable


@dataclass
class RankSpec:
    """What one child needs to know to run as one torchrun worker."""

    program: str
    args: list[str]
    rank: int
    world_size: int
    nproc_per_node: int
    module: str | None = None  # run as `python -m module` (program: its file)
    mode: str = "fake"
    timeout: float = 60.0
    steps: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    device: str = "cuda"  # the job's machine: GPUs (stand-ins) or "cpu" (none, as torch says)
    output: str | None = None  # file for the rank's stdout and stderr (None: discarded)
    fault: str | None = None  # file faulthandler writes a crashing rank's Python stack to
    # Symbolic steering: comparisons of numbers fake tensors did not compute take the outcome
    # their placeholder gives, on every rank alike; `flips` names the decisions (`site#n`, the
    # n-th at that line) that take the other outcome (the driver's exploration).
    symbolic: bool = False
    flips: tuple[str, ...] = ()


def worker_env(rank: int, world_size: int, nproc_per_node: int) -> dict[str, str]:
    """The variables torchrun sets for a worker."""
    node = rank // nproc_per_node
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank % nproc_per_node),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(nproc_per_node),
        "GROUP_RANK": str(node),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "ROLE_NAME": "default",
        "NODE_RANK": str(node),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "commlint-dryrun",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "OMP_NUM_THREADS": "1",
        "COMMLINT_DRYRUN": "1",
    }


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


_RECORDER: Recorder


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


def _wrap(module: Any, name: str, make: Any) -> None:
    orig = getattr(module, name, None)
    if orig is not None:
        setattr(module, name, make(orig))


def _entropy_per_rank(rank: int) -> None:
    """The operating system's randomness (`os.urandom`, an unseeded `random`, an unseeded
    `np.random.default_rng()`: accelerate's RegressionDataset) becomes a stream fixed per
    rank: different on each rank, as in a real run, and the same in every pass, so values a
    rank sends depend only on what it received (otherwise they never settle, and a program
    comparing what it sent with what came back fails where a real run passes). torch's own
    default generator too: torch seeds it from the OS in every new process (torchrun's ranks
    of an unseeded program initialise their models differently), while forked ranks would
    all share the parent's state."""
    import random

    stream = random.Random(f"commlint-rank-{rank}")
    torch.default_generator.manual_seed(stream.getrandbits(63))
    os.urandom = stream.randbytes
    random._urandom = stream.randbytes  # type: ignore[attr-defined]  # SystemRandom, secrets
    random.seed(f"commlint-rank-{rank}-random")
    with contextlib.suppress(ImportError):
        import numpy.random
        import numpy.random.bit_generator as bits

        bits.randbits = stream.getrandbits  # (an unseeded SeedSequence draws its entropy here)
        numpy.random.seed(stream.getrandbits(32))


def _install(spec: RankSpec, recorder: Recorder, private_root: bool = False) -> None:
    import torch.distributed.distributed_c10d as c10d

    _entropy_per_rank(spec.rank)

    dist.Backend.register_backend(
        BACKEND, make_backend(recorder), extended_api=True, devices=["cpu", "cuda"]
    )
    if spec.device == "cuda":
        _stub_cuda(spec.rank % spec.nproc_per_node, spec.nproc_per_node)
    else:  # a CPU machine: torch.cuda answers as the CPU build does (no GPU)
        from commlint.plans.dryrun import cuda_standins

        _CUDA_ON_CPU.gpus = False
        cuda_standins.compile_on_cpu()

    default_backend = ["nccl"]  # the default group's backends, as torch gives them

    def make_init(orig: Any) -> Any:
        def init_process_group(backend: Any = None, init_method: Any = None, **kw: Any) -> Any:
            if spec.device == "cpu" and str(backend or "").lower() == "nccl":
                # torch's own words on a machine without GPUs
                raise RuntimeError(
                    "ProcessGroupNCCL is only supported with GPUs, no GPUs found! "
                    "(--device cpu: the job runs on CPUs)"
                )
            if recorder.requested_backend is None:
                gpu_default = "nccl" if spec.device == "cuda" else "gloo"
                recorder.requested_backend = str(backend) if backend else gpu_default
                recorder.send(("backend", recorder.requested_backend))
                # no backend named: torch gives the group gloo for CPU tensors, NCCL for GPU
                default_backend[0] = str(backend) if backend else "cpu:gloo,cuda:nccl"
            kw.pop("store", None)
            kw.pop("device_id", None)
            kw.pop("pg_options", None)
            kw["rank"] = spec.rank if kw.get("rank", -1) in (-1, None) else kw["rank"]
            kw["world_size"] = (
                spec.world_size if kw.get("world_size", -1) in (-1, None) else kw["world_size"]
            )
            return orig(backend=BACKEND, store=dist.HashStore(), **kw)

        return init_process_group

    for mod in (dist, c10d):
        _wrap(mod, "init_process_group", make_init)
    with contextlib.suppress(ImportError):
        import torch.distributed.device_mesh as dm

        if hasattr(dm, "init_process_group"):
            dm.init_process_group = dist.init_process_group

    def make_helper(orig: Any) -> Any:
        def helper(group_size, group_rank, global_ranks, backend, store, group_name, *a, **k):
            # The backend this group would really have: its own, or the default group's.
            asked = str(backend) if backend is not None else BACKEND
            recorder.group_backends[str(group_name)] = (
                default_backend[0] if asked in (BACKEND, "undefined") else asked
            )
            if global_ranks:
                # torch's name for the group (a count of new_group calls, or a hash of its
                # members): members must agree on it (CL212, `graph/group_names.py`).
                site, _ = user_site(rec_mod._frames(2))
                created = (str(group_name), [int(r) for r in global_ranks], site)
                recorder.send(("gc", *created))
            k.pop("backend_options", None)
            k.pop("device_id", None)
            if a:
                a = (None, *a[1:])
            return orig(group_size, group_rank, global_ranks, BACKEND, store, group_name, *a, **k)

        return helper

    _wrap(c10d, "_new_process_group_helper", make_helper)

    def make_batch(orig: Any) -> Any:
        def batch_isend_irecv(p2p_op_list: Any) -> Any:
            recorder.batches += 1
            recorder.batch = f"b{recorder.batches}"
            try:
                return orig(p2p_op_list)
            finally:
                recorder.batch = None

        return batch_isend_irecv

    for mod in (dist, c10d):
        _wrap(mod, "batch_isend_irecv", make_batch)

    def make_monitored_barrier(orig: Any) -> Any:
        def monitored_barrier(
            group: Any = None, timeout: Any = None, wait_all_ranks: bool = False
        ) -> None:
            # torch's own checks, against the backend the script asked for (the recording
            # group's backend is `commlint`); gloo's barrier itself is recorded as a barrier.
            if c10d._rank_not_in_group(group):
                c10d._warn_not_in_group("monitored_barrier")
                return None
            pg = c10d._get_default_group() if group is None else group
            if str(recorder.group_backends.get(pg.group_name, "")).lower() != "gloo":
                raise ValueError("monitored_barrier is only implemented for GLOO backend.")
            if isinstance(timeout, (int, float)):
                timeout = timedelta(seconds=timeout)
            if timeout is not None:
                c10d._check_valid_timeout(timeout)
            return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

        return monitored_barrier

    for mod in (dist, c10d):
        _wrap(mod, "monitored_barrier", make_monitored_barrier)

    _meshes_on_cpu()
    _dtensor_rng_as_on_gpus()
    _flex_attention_on_cpu()
    _modules_stay_on_cpu()
    devices.install()
    gpu_paths.install()
    _spawned_workers_are_ranks(spec.rank % spec.nproc_per_node, spec.nproc_per_node)
    _checkpoints_load_on_cpu()
    if spec.mode == "fake":
        _install_fake_helpers(c10d)
        _unread_values(recorder, spec)
        _note_fake_limits()
        _real_data_loader_workers()
        _deep_copies_keep_constants()
        _hooks_see_the_gpu()
    else:
        _backward_sees_the_gpu()

    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp_init = DDP.__init__

    def ddp_init_cpu(
        self: Any, module: Any, device_ids: Any = None, output_device: Any = None, *a: Any, **k: Any
    ) -> None:
        ddp_init(self, module, None, None, *a, **k)

    DDP.__init__ = ddp_init_cpu
    pre_forward = DDP._pre_forward

    def ddp_pre_forward(self: Any, *a: Any, **k: Any) -> Any:
        recorder.bucket = 0  # buckets of the coming backward count from 0
        return pre_forward(self, *a, **k)

    DDP._pre_forward = ddp_pre_forward

    if spec.steps:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        count = [0]

        def after_step(opt: Any, args: Any, kwargs: Any) -> None:
            count[0] += 1
            if count[0] >= spec.steps:
                raise StopRank("steps", f"stopped after {spec.steps} optimizer steps (--steps)")

        register_optimizer_step_post_hook(after_step)

    real_exit = os._exit
    rank_process = os.getpid()

    def _exit(code: int) -> None:
        if os.getpid() != rank_process:  # a process the rank forked (a DataLoader worker)
            real_exit(code)
        site, _ = user_site(rec_mod._frames(2))
        recorder.flush()
        recorder.send(("end", {"kind": "exit", "message": f"os._exit({code})", "site": site}))
        _flush_output()
        real_exit(code)

    os._exit = _exit
    # pinning needs a GPU; DataLoader's pin-memory thread pins outside CudaOnCpu's reach
    torch.Tensor.pin_memory = lambda self, device=None: self  # type: ignore[method-assign]
    torch.Tensor.is_pinned = lambda self, device=None: False  # type: ignore[method-assign]
    scratch = os.path.dirname(spec.output) if spec.output else tempfile.mkdtemp()
    FileView(recorder, scratch, real_folders=private_root).install()


def _deep_copies_keep_constants() -> None:
    """A fake tensor that knows its value (a parameter made from `torch.tensor(2.0)`) fails to
    deep-copy inside the fake mode (its real constant would be copied there too): copy the
    fake tensor without it, then give the copy a real copy of the constant."""
    from torch._subclasses.fake_tensor import FakeTensor

    orig = torch.Tensor.__deepcopy__

    def __deepcopy__(self: torch.Tensor, memo: dict[int, Any]) -> torch.Tensor:
        if not isinstance(self, FakeTensor) and not self.is_meta:
            # a real tensor (torchmetrics' default state, torch.tensor(0.0)): a real copy, as
            # in a real run — copying its storage inside the fake mode fails
            with unset_fake_temporarily():
                return orig(self, memo)
        constant = getattr(self, "constant", None)
        if constant is None:
            new = orig(self, memo)
            fingerprint.copied(self, new)  # a copy holds what the original holds
            return new
        self.constant = None
        try:
            new = orig(self, memo)
        finally:
            self.constant = constant
        with unset_fake_temporarily():
            know(new, constant.clone())
        return new

    torch.Tensor.__deepcopy__ = __deepcopy__


def _real_data_loader_workers() -> None:
    """DataLoader workers are forked from the rank, inside its fake tensor mode: they load
    and collate real data (as in a real run) and hand it over through shared memory, which
    fake tensors cannot do. The rank's model still sees it as non-fake input."""
    from torch.utils.data._utils import worker

    from commlint.plans.dryrun.unread import UnreadFloat

    loop = real_tensors(worker._worker_loop)

    def worker_loop(*a: Any, **k: Any) -> Any:
        # The loader's base seed was drawn from a fake tensor: an unread number.
        a = tuple(int(float(x)) if isinstance(x, UnreadFloat) else x for x in a)
        k = {n: int(float(x)) if isinstance(x, UnreadFloat) else x for n, x in k.items()}
        return loop(*a, **k)

    worker._worker_loop = worker_loop
    from torch.utils.data import dataloader

    it_cls = dataloader._MultiProcessingDataLoaderIter
    it_cls._try_get_data = real_tensors(it_cls._try_get_data)  # unpickles shared memory
    # Samplers draw their order from torch's generator: real numbers, cheap to compute, and
    # the indices must be real to index a dataset.
    from torch.utils.data import distributed, sampler

    for cls in (sampler.RandomSampler, sampler.SubsetRandomSampler, distributed.DistributedSampler):
        cls.__iter__ = _real_iterator(cls.__iter__)


def _real_iterator(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A generator method, each step of which runs outside the fake tensor mode."""

    def __iter__(self: Any) -> Any:
        with unset_fake_temporarily():
            it = iter(orig(self))
        while True:
            with unset_fake_temporarily():
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item

    return __iter__


def _unread_values(recorder: Recorder, spec: RankSpec) -> None:
    """`.item()` / `.tolist()` of fake tensors without a value give unread numbers (see
    `unread.py`); each line that reads one is noted once in the trace's `meta.assumes`.
    With `spec.symbolic`, a comparison of one is a decision: the placeholder's outcome (or
    the other one, for a decision in `spec.flips`), sent to the driver as `decision`."""
    from commlint.plans.dryrun import unread

    said: set[Any] = set()

    def assume_once(key: Any, what: str) -> None:
        if key not in said:
            said.add(key)
            recorder.send(("assume", what))

    def on_read() -> str | None:
        site, _ = user_site(rec_mod._frames(3))
        if site:
            # Without symbolic steering a test of it would have stopped the rank (and the
            # run gone on with real tensors): what this run did with it steered nothing.
            steers = (
                ""
                if spec.symbolic
                else ": it is only printed, formatted or computed with, never steers the program"
            )
            assume_once(
                ("read", site), f"the value read at {site} was not computed (fake tensors){steers}"
            )
        return site

    counts: dict[str | None, int] = {}
    flips = set(spec.flips)

    def decide(value: Any, outcome: bool, holds: bool | None) -> bool:
        site, _ = user_site(rec_mod._frames(2))
        if holds is not None:
            # an `assert`: the program's own check of its values, taken to pass (its other
            # outcome only raises AssertionError, which says nothing about communication)
            what = (
                f"the assertion at {site} on a value fake tensors did not compute was taken to hold"
            )
            assume_once(("test", site), what)
            return holds
        read, uniform = unread.read_at(value), unread.provenance(value)
        n = counts.get(site, 0)
        counts[site] = n + 1
        key = f"{site}#{n}"
        if key in flips:
            outcome = not outcome
        fp = fingerprint.decision(unread.fingerprint_of(value))
        recorder.send(("decision", key, read, site, outcome, uniform, fp))
        scope = "the same on every rank (a collective's result)" if uniform else "rank-local"
        what = (
            f"the test at {site} of the value read at {read or 'a fake tensor'} ({scope}, not "
            f"computed) was taken as {outcome} on every rank"
            + ("" if uniform else "; the other outcome was recorded too")
        )
        assume_once(("test", site), what)
        return outcome

    def on_assume(what: str) -> None:
        assume_once(what, f"assumed: {what}")

    if spec.symbolic:
        fingerprint.enable(spec.rank)  # is a decision's number the same on every rank? (`driver`)
    unread.install(on_read, on_assume, rec_mod.is_uniform, decide if spec.symbolic else None)


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


def _spawned_workers_are_ranks(local_rank: int, local_world: int) -> None:
    """A script that starts its own workers (`torch.multiprocessing.spawn(main, args,
    nprocs=torch.cuda.device_count())`, the DDP tutorials) instead of being started by
    torchrun: the simulated rank is worker `LOCAL_RANK` of the spawn, and runs `main`
    itself (a spawned interpreter would have no GPU stand-ins)."""
    import torch.multiprocessing as mp

    def spawn(fn: Any, args: tuple = (), nprocs: int = 1, join: bool = True, **k: Any) -> Any:
        if nprocs != local_world:
            raise RuntimeError(
                f"the script spawns {nprocs} worker processes per node; record it with "
                f"`commlint run --nproc-per-node {nprocs}` (each simulated rank is one worker)"
            )
        fn(local_rank, *args)
        return None if join else _Finished()

    mp.spawn = torch.multiprocessing.spawn = spawn
    mp.start_processes = lambda fn, args=(), nprocs=1, join=True, **k: spawn(fn, args, nprocs, join)


class _Finished:
    """What `spawn(join=False)` returns: its workers (this rank's) have already run."""

    def join(self, timeout: float | None = None, grace_period: float | None = None) -> bool:
        return True

    def pids(self) -> list[int]:
        return [os.getpid()]


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


_NO_COMM_OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam")
_INIT_FUNCTIONS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
)


_NOT_RANDOM = ("constant_", "ones_", "zeros_")


def _dtensor_rng_tracker_for(tensor: Any) -> None:
    """What a skipped random init of a DTensor on a GPU mesh does first in a real run: its
    random op makes DTensor's RNG tracker, which syncs rank 0's RNG state (a broadcast)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor import _random as rng

    if not (gpu_paths.gpu_meshes and isinstance(tensor, DTensor)) or rng._rng_tracker:
        return
    if rng.is_rng_supported_mesh(tensor.device_mesh):
        rng._rng_tracker = rng.OffsetBasedRNGTracker(tensor.device_mesh)


def _skip_computation_without_communication() -> None:
    """Under fake tensors, weight initialisation and the updates of torch's own optimizers
    compute nothing anyone can see and never communicate: skip them (they dominate the cost
    of a dry-run step). The optimizer step hooks still run."""
    import torch.nn.init as init

    def keeping(name: str) -> Callable[..., Any]:
        def keep(tensor: Any, *a: Any, **k: Any) -> Any:
            if name not in _NOT_RANDOM:
                _dtensor_rng_tracker_for(tensor)
            fingerprint.initialised(tensor, name, a, k)  # what a real run's would hold
            return tensor

        return keep

    for name in _INIT_FUNCTIONS:
        if hasattr(init, name):
            setattr(init, name, keeping(name))
    for name in _NO_COMM_OPTIMIZERS:
        cls = getattr(torch.optim, name, None)
        if cls is None:
            continue

        def step(self: Any, closure: Any = None, _step: Any = cls.step) -> Any:
            rates = [g.get("lr") for g in self.param_groups]
            if not self.__dict__.get("_commlint_stepped") and all(
                type(lr) in (float, int) for lr in rates
            ):
                # the first step makes the optimizer's state (`exp_avg`, `momentum_buffer`,
                # on fake tensors), which programs read (`opt.state[p]["exp_avg"]`): it runs
                # at a learning rate of 0, so the parameters stay as every skipped step
                # leaves them (a value the dry-run knows stays the same on every rank)
                self._commlint_stepped = True
                for g in self.param_groups:
                    g["lr"] = 0.0
                try:
                    out = _step(self, closure)
                finally:
                    for g, lr in zip(self.param_groups, rates, strict=True):
                        g["lr"] = lr
            else:
                out = closure() if closure is not None else None
            fingerprint.stepped(self)  # the parameters hold what a real step makes them
            return out

        # Optimizer.__init__ wraps `step` once more so the step hooks still run.
        cls.step = step


class _LazyChunks(Sequence):
    """`torch.chunk(tensor, n, dim)` padded with empty tensors to n pieces, as FSDP2's
    `_chunk_with_empty`, but each piece made only when asked for: FSDP2 chunks every
    parameter into as many pieces as the data-parallel world and keeps one or two, which on
    fake tensors costs O(world) tensor objects per parameter on every rank (~0.8 s of a
    rank at W=64). A piece is the same view `torch.chunk` returns (a narrow of the dim)."""

    def __init__(self, tensor: torch.Tensor, num_chunks: int, dim: int):
        self._tensor, self._n, self._dim = tensor, num_chunks, dim
        size = tensor.size(dim)
        self._step = -(-size // num_chunks)  # torch.chunk: ceil(size / chunks) per piece
        self._full = -(-size // self._step)  # pieces torch.chunk returns; the rest are empty

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        if i >= self._full:
            return self[0].new_empty(0)
        start = i * self._step
        length = min(self._step, self._tensor.size(self._dim) - start)
        return self._tensor.narrow(self._dim, start, length)


def _chunk_lazily(orig: Any) -> Any:
    def chunk_with_empty(tensor: torch.Tensor, num_chunks: int, dim: int) -> Any:
        if num_chunks <= 1 or tensor.size(dim) == 0:
            return orig(tensor, num_chunks, dim)
        return _LazyChunks(tensor, num_chunks, dim)

    return chunk_with_empty


def real_tensors(orig: Callable[..., Any]) -> Callable[..., Any]:
    """`orig`, run outside the fake tensor mode (it needs values, not just shapes)."""

    def wrapper(*a: Any, **k: Any) -> Any:
        with unset_fake_temporarily():
            return orig(*a, **k)

    return wrapper


def _fake_tensors_pickle_as_meta() -> None:
    """`torch.save` (a checkpoint) and pickling of a fake tensor: its value where it knows one,
    else a meta tensor of its shape, dtype and strides (no data); `torch.load` gives it back
    as a fake tensor of that shape."""

    def reduce_ex(self: FakeTensor, proto: Any) -> Any:
        if self.constant is not None:
            return self.constant.__reduce_ex__(proto)
        meta = (self.dtype, tuple(self.size()), self.stride(), self.requires_grad)
        return torch._utils._rebuild_meta_tensor_no_storage, meta

    FakeTensor.__reduce_ex__ = reduce_ex


def _install_fake_helpers(c10d: Any) -> None:
    """What fake tensors cannot do: object collectives, DeviceMesh set-up, DDP's checks."""
    _skip_computation_without_communication()
    _fake_tensors_pickle_as_meta()
    with contextlib.suppress(ImportError):
        from torch.distributed.fsdp._fully_shard import _fsdp_param

        _wrap(_fsdp_param, "_chunk_with_empty", _chunk_lazily)
    for name in (
        "all_gather_object",
        "gather_object",
        "broadcast_object_list",
        "scatter_object_list",
        "send_object_list",
        "recv_object_list",
    ):
        for mod in (dist, c10d):
            _wrap(mod, name, real_tensors)
    with contextlib.suppress(ImportError):
        import torch.distributed.device_mesh as dm
        from torch.distributed.device_mesh import DeviceMesh

        DeviceMesh.__init__ = real_tensors(DeviceMesh.__init__)
        dm.init_device_mesh = real_tensors(dm.init_device_mesh)
    import torch.nn.parallel.distributed as ddp_mod

    verify = ddp_mod._verify_param_shape_across_processes

    def verify_shapes(pg: Any, params: Any, logger: Any = None) -> Any:
        # Same communication, from zero-stride stand-ins that cost one element each.
        with unset_fake_temporarily():
            stand_ins = [torch.zeros((), dtype=p.dtype).expand(p.shape) for p in params]
            return verify(pg, stand_ins, logger)

    ddp_mod._verify_param_shape_across_processes = verify_shapes
    reducer = torch._C._distributed_c10d.Reducer

    told = []

    def rebuild_buckets(self: Any) -> bool:
        # The rebuild copies parameter data, which fake tensors do not have: the first
        # iteration's buckets stay (an assumption noted in the trace's meta). The rebuild's
        # first step stays: DDP's check that the previous backward reduced every bucket,
        # which raises its own error for parameters that got no gradient (unused parameters
        # without find_unused_parameters=True).
        self._check_reducer_finalized()
        if not told:
            told.append(True)
            _RECORDER.send(("assume", "DDP buckets keep the first iteration's order (no rebuild)"))
        return False

    reducer._rebuild_buckets = rebuild_buckets


def _error_site(exc: BaseException) -> str | None:
    site = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if is_user_file(frame.f_code.co_filename):
            site = f"{short_path(frame.f_code.co_filename)}:{line}"
    return site


_DDP_UNFINISHED = "Expected to have finished reduction in the prior iteration"
_DDP_NO_GRAD = re.compile(r"Parameter indices which did not receive grad for rank \d+: ([\d ]+)")


def live_fake_bytes() -> int:
    """Bytes the rank's live fake tensors stand for (each storage once): what the same
    tensors would hold with real values, so a lower bound of a real re-run's memory."""
    import gc

    from torch._subclasses.fake_tensor import FakeTensor

    seen: set[int] = set()
    total = 0
    for obj in gc.get_objects():
        if issubclass(type(obj), FakeTensor):  # type(): a proxy's __class__ may raise
            try:
                storage = obj.untyped_storage()
                key = storage._cdata
            except Exception:  # a tensor whose storage cannot be asked for (sparse, nested)
                continue
            nbytes = storage.nbytes()
            if key not in seen and type(nbytes) is int:  # a data-dependent size: not counted
                seen.add(key)
                total += nbytes
    return total


def _one_line(exc: BaseException) -> str:
    """The exception's first line; DDP's unused-parameter error (whose first line stops
    mid-sentence) summed up."""
    text = str(exc).strip()
    if type(exc).__name__ == "GuardOnDataDependentSymNode":
        test = re.search(r"data-dependent expression (.+?) \(unhinted", text)
        return (
            f"{type(exc).__name__}: a data-dependent size (nonzero, unique, bincount, a "
            "boolean mask) decides what the program does here"
            + (f" ({test.group(1)})" if test else "")
        )
    if text.startswith(_DDP_UNFINISHED):
        return f"{type(exc).__name__}: {_ddp_unfinished(text)}"
    lines = text.splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _ddp_unfinished(text: str) -> str:
    """DDP's error when a parameter got no gradient in the previous backward (unused
    parameters without `find_unused_parameters=True`), as DDP says it, in one line."""
    found = _DDP_NO_GRAD.search(text)
    which = f"parameters {', '.join(found.group(1).split())}" if found else "some parameters"
    return (
        f"{_DDP_UNFINISHED} before starting a new one — DDP: {which} of this rank got no "
        "gradient in the previous backward (unused parameters); pass "
        "find_unused_parameters=True to DistributedDataParallel, or make every parameter "
        "take part in the loss"
    )


def run_rank(spec: RankSpec, table: ValueTable, conn: Any, replies: Any = None) -> None:
    """Child entry point: never returns (leaves with os._exit so torch's atexit cannot hang)."""
    global _RECORDER
    real_exit = os._exit
    try:
        # A session of its own: the parent stops the rank with everything it started. A
        # child that starts a session of its own (`start_new_session=True`, a daemon) is
        # found by the marker it inherits in its environment.
        os.setsid()
        os.environ[SESSION_MARKER] = str(os.getpid())
        # first, while the process has one thread: C code's writes go to a private overlay
        private_root = bool(spec.output) and enter_private_root(os.path.dirname(spec.output))
        out = os.open(spec.output or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        # The parent's sys.stdout may not write to fd 1 (pytest, an embedding program).
        sys.stdout, sys.stderr = (
            io.TextIOWrapper(
                io.FileIO(fd, "w", closefd=False),
                encoding="utf-8",
                errors="backslashreplace",
                line_buffering=True,
            )
            for fd in (1, 2)
        )
        if spec.fault:
            faulthandler.enable(open(spec.fault, "w"))  # noqa: SIM115 (open for the process)
        os.environ.update(worker_env(spec.rank, spec.world_size, spec.nproc_per_node))
        os.environ.update(spec.env)

        send = PipeSend(conn)
        recorder = Recorder(spec.rank, spec.world_size, table, send)
        if replies is not None:
            recorder.live = Live(send, replies, spec.timeout)
        _RECORDER = recorder
        _install(spec, recorder, private_root)
        end = _run_program(spec, recorder)
        recorder.flush()
        send(("files", executed.user_files(spec.program)))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        send(("usage", usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024))
        send(("end", end))
        conn.close()
    except BaseException:  # the parent reports a rank that ends without an "end" message
        pass
    _flush_output()
    real_exit(0)


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _note_fake_limits() -> None:
    """Note each fake-tensor limit as it is raised (`unread.RAISED`; `UnreadValueSteers` is a
    `DataDependentOutputException`)."""
    from torch._subclasses import fake_tensor as ft

    for cls in (ft.DataDependentOutputException, ft.DynamicOutputShapeException):
        init = cls.__init__

        def noted(self: Any, *a: Any, _init: Any = init, **k: Any) -> None:
            _init(self, *a, **k)
            site, _ = user_site(rec_mod._frames(2))
            _RAISED[:] = [(_one_line(self), site)]

        cls.__init__ = noted


def _unconfirmed_tensor_makers(recorder: Recorder) -> dict[str, Any] | None:
    """A placeholder number given to a call the flow analysis took for a tensor's maker by
    its name alone, where no tensor was made of it: where it went is not known, so the rank
    ends as at a fake-tensor limit (a real re-run within the budget, else an error)."""
    from commlint.plans.dryrun import flow

    if not flow.UNCONFIRMED:
        return None
    file, line, name = next(iter(flow.UNCONFIRMED.values()))
    site = f"{short_path(file)}:{line}"
    message = (
        f"a number fake tensors did not compute went to {name} at {site}, taken "
        "for a tensor's maker by its name, and no tensor was made of it there"
    )
    recorder.send(("fake-limit", message, site, True, live_fake_bytes()))
    return {"kind": "exception", "message": message, "site": site}


def _run_program(spec: RankSpec, recorder: Recorder) -> dict[str, Any] | None:
    sys.argv = [os.path.abspath(spec.program) if spec.module else spec.program, *spec.args]
    # `python -m` puts the working folder first on the path, `python train.py` its folder
    sys.path.insert(
        0, os.getcwd() if spec.module else os.path.dirname(os.path.abspath(spec.program))
    )

    # The parent stops a rank that makes no progress, or computes past --timeout of CPU time
    # (never one that is only slow on a busy machine): it raises here, where it is.
    def on_stop(signum: int, frame: Any) -> None:
        why = next(k for k, v in STOP_SIGNALS.items() if v == signum)
        raise StopRank("timeout", STOP_MESSAGES[why].format(t=spec.timeout))

    for stop_signal in STOP_SIGNALS.values():
        signal.signal(stop_signal, on_stop)
    stack = contextlib.ExitStack()
    try:
        if spec.mode == "fake":
            fake_tensor.CONSTANT_NUMEL_LIMIT = SMALL_REAL
            # a ShapeEnv gives data-dependent sizes (nonzero, unique, bincount, boolean masks)
            # a symbol instead of stopping: only a test of one stops the rank (`FAKE_LIMITS`);
            # every size the program gives stays a number (static_shapes)
            stack.enter_context(
                RecordingFakeTensorMode(
                    recorder,
                    allow_non_fake_inputs=True,
                    # `.item()` still raises (the unread values of `unread.py` answer it)
                    shape_env=ShapeEnv(allow_scalar_outputs=False),
                    static_shapes=True,
                )
            )
        stack.enter_context(_CUDA_ON_CPU)
        with stack:
            if spec.module:
                runpy.run_module(spec.module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(spec.program, run_name="__main__")
        return _unconfirmed_tensor_makers(recorder)
    except StopRank as exc:
        if exc.kind == "steps":
            return _unconfirmed_tensor_makers(recorder)
        return {"kind": "timeout", "message": exc.message, "site": _error_site(exc)}
    except SystemExit as exc:
        swallowed = _RAISED[-1:] if exc.code not in (0, None) else []
        if spec.mode == "fake" and swallowed:
            # the program caught a fake-tensor limit (`except Exception:` around `main()`,
            # as @hydra.main does) and exited: the limit is what stopped the rank
            message, site = swallowed[0]
            recorder.send(("fake-limit", message, site, True, live_fake_bytes()))
            return {"kind": "exception", "message": message, "site": site}
        # sys.exit(0) ends the rank as cleanly as the script's end, but where it left is
        # worth knowing when a peer still waits for it.
        unconfirmed = _unconfirmed_tensor_makers(recorder) if exc.code in (0, None) else None
        return unconfirmed or {
            "kind": "exit",
            "message": f"sys.exit({exc.code!r})",
            "site": _error_site(exc),
        }
    except BaseException as exc:
        message, site = _one_line(exc), _error_site(exc)
        limit = type(exc).__name__ in FAKE_LIMITS
        if spec.mode == "fake" and not limit and _RAISED:
            # a limit caught by the program, which then failed on what it did instead
            (message, site), limit = _RAISED[-1], True
        missing = missing_api.explain(exc, _one_line(exc), short_path)
        if missing is not None:  # the installed torch lacks a name the program uses
            (message, site), limit = missing, False
        if os.environ.get("COMMLINT_DEBUG"):  # where in the program (or torch) it came from
            import traceback

            # into the run's scratch (the rank's own view hides the working folder's files
            # from you); the parent appends it to the file in the working folder
            name = f"commlint-debug-rank{spec.rank}-{spec.mode}.txt"
            fd = os.open(
                os.path.join(os.path.dirname(spec.output or ""), name),
                os.O_WRONLY | os.O_CREAT | os.O_APPEND,
            )
            try:
                os.write(fd, traceback.format_exc().encode())
            finally:
                os.close(fd)
        if spec.mode == "fake" and (
            limit or (not str(exc).startswith(_DDP_UNFINISHED) and not own(exc))
        ):
            # DDP's own check failed (its reducer state, not tensor data): no need to see
            # whether real tensors raise it too.
            recorder.send(("fake-limit", message, site, limit, live_fake_bytes()))
        return {"kind": "exception", "message": message, "site": site}
    finally:
        for stop_signal in STOP_SIGNALS.values():  # a stop that comes after the end is moot
            signal.signal(stop_signal, signal.SIG_IGN)
