"""One simulated rank in a forked process: torchrun's environment, no GPU, the user's script.

Patches are installed here, after the fork, so the parent stays clean. The rank streams its
actions to the parent as it goes, so a rank that is killed still leaves its trace behind.

This module is the rank's sandbox and its run: torchrun's environment (`RankSpec`,
`worker_env`), the patches installed after the fork (`_install`: files, entropy, workers),
and the run itself (`run_rank`, `_run_program`). Device stand-ins are `gpu_standins.py`'s,
what fake tensors cannot do `fake_helpers.py`'s, how a rank ends on an exception
`rank_errors.py`'s.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import resource
import runpy
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses import fake_tensor
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from commlint.plans.dryrun import (
    devices,
    executed,
    gpu_paths,
    gpu_standins,
    missing_api,
    sites,
)
from commlint.plans.dryrun.causes import FAKE_LIMITS, own
from commlint.plans.dryrun.channel import Live, PipeSend
from commlint.plans.dryrun.fake_helpers import (
    _deep_copies_keep_constants,
    _install_fake_helpers,
    _real_data_loader_workers,
    _unread_values,
    _wrap,
)
from commlint.plans.dryrun.fake_helpers import real_tensors as real_tensors  # warm.py's
from commlint.plans.dryrun.files import FileView
from commlint.plans.dryrun.functional import RecordingFakeTensorMode
from commlint.plans.dryrun.gpu_standins import (
    _CUDA_ON_CPU,
    _backward_sees_the_gpu,
    _checkpoints_load_on_cpu,
    _dtensor_rng_as_on_gpus,
    _flex_attention_on_cpu,
    _hooks_see_the_gpu,
    _meshes_on_cpu,
    _modules_stay_on_cpu,
    _stub_cuda,
)
from commlint.plans.dryrun.overlay import enter_private_root
from commlint.plans.dryrun.process_group import make_backend
from commlint.plans.dryrun.procs import SESSION_MARKER, STOP_MESSAGES, STOP_SIGNALS
from commlint.plans.dryrun.provenance import SMALL_REAL
from commlint.plans.dryrun.rank_errors import (
    _DDP_UNFINISHED,
    _error_site,
    _flush_output,
    _note_fake_limits,
    _one_line,
    _unconfirmed_tensor_makers,
    live_fake_bytes,
)
from commlint.plans.dryrun.recorder import Recorder
from commlint.plans.dryrun.sites import BACKEND, StopRank, short_path, user_site
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
    rank_classes: bool = False  # track the rank (`tracked.py`) and send its class record


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
                site, _ = user_site(sites._frames(2))
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
        site, _ = user_site(sites._frames(2))
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


def run_rank(spec: RankSpec, table: ValueTable, conn: Any, replies: Any = None) -> None:
    """Child entry point: never returns (leaves with os._exit so torch's atexit cannot hang)."""
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
        gpu_standins._RECORDER = recorder  # the stand-ins' syncs are this rank's
        _install(spec, recorder, private_root)
        finish_classes = None
        if spec.rank_classes:
            from commlint.plans.dryrun import tracked, tracked_modules

            finish_classes = tracked.install(
                spec.rank, spec.world_size, spec.nproc_per_node, spec.device, recorder
            )
            # DeviceMesh, FSDP2, DTensor and pipelining carry the tracked rank (the module sits
            # above `tracked`, which it builds on)
            tracked_modules.install()
        end = _run_program(spec, recorder)
        recorder.flush()
        if finish_classes is not None:
            send(("classes", finish_classes()))
        send(("files", executed.user_files(spec.program)))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        send(("usage", usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024))
        send(("end", end))
        conn.close()
    except BaseException:  # the parent reports a rank that ends without an "end" message
        pass
    _flush_output()
    real_exit(0)


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
