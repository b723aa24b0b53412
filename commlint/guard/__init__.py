"""The runtime guard: a hang in a real job becomes a diagnosed crash in seconds.

    torchrun --nproc-per-node 4 -m commlint.guard [--timeout S] [--check auto|all|sample:N|off]
        [--save-trace DIR] [--kill-stalled] (train.py | -m module) ARGS...

or, in code that starts its own processes, `commlint.guard.install()` before the first
communication call. The program runs for real on its own backend; the guard records its
communication, checks collective fingerprints across members before they can hang, and on a
stall runs the commlint checker on every rank's recent calls. See docs/guard.md.
"""

from __future__ import annotations

import atexit
import sys
import threading
import traceback
from typing import Any

from commlint.guard.core import CommlintGuardError, Guard, Options
from commlint.guard.ring import DONE, FAILED, PENDING

__all__ = ["CommlintGuardError", "Options", "install", "installed"]

_GUARD: Guard | None = None


def installed() -> Guard | None:
    """The guard of this process, if `install()` ran."""
    return _GUARD


def install(
    timeout: float | None = None,
    check: str | None = None,
    save_trace: str | None = None,
    kill_stalled: bool | None = None,
) -> Guard:
    """Wrap `torch.distributed` in this process; arguments override `COMMLINT_GUARD_*`.

    Idempotent. Call it before the program's first communication call (before or after
    `init_process_group`); calls bound earlier by `from torch.distributed import x` are not
    seen."""
    global _GUARD
    if _GUARD is not None:
        return _GUARD
    options = Options.from_env()
    if timeout is not None:
        options.timeout = float(timeout)
    if check is not None:
        options.check = check
    if save_trace is not None:
        options.save_trace = save_trace
    if kill_stalled is not None:
        options.kill_stalled = kill_stalled
    guard = Guard(options)
    _patch(guard)
    _GUARD = guard
    atexit.register(_at_exit)
    previous_hook = sys.excepthook

    def excepthook(kind: Any, value: Any, tb: Any) -> None:
        record_exception(value)
        if previous_hook is sys.__excepthook__:
            from commlint.guard.summary import print_exception

            print_exception(value)  # without the guard's frames; its verdict block last
        else:
            previous_hook(kind, value, tb)

    sys.excepthook = excepthook
    return guard


def _patch(guard: Guard) -> None:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from commlint.guard.calls import API

    for name in API:
        original = getattr(c10d, name, None)
        if original is None or getattr(original, "__commlint_guard__", False):
            continue
        wrapped = guard.wrap(name, original)
        guard.originals[name] = original
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is original:
            setattr(dist, name, wrapped)

    _patch_creators(guard)
    batch = c10d.batch_isend_irecv

    def batch_isend_irecv(p2p_op_list: list, *args: Any, **kwargs: Any) -> Any:
        return guard.batch(batch, p2p_op_list, *args, **kwargs)

    batch_isend_irecv.__commlint_guard__ = True  # type: ignore[attr-defined]
    c10d.batch_isend_irecv = batch_isend_irecv
    dist.batch_isend_irecv = batch_isend_irecv

    init = c10d.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        out = init(*args, **kwargs)
        guard.started()  # heartbeats from the start: a rank that never communicates is alive
        return out

    c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group

    destroy = c10d.destroy_process_group

    def destroy_process_group(group: Any = None) -> Any:
        if group is None or group is c10d.GroupMember.WORLD:
            guard.publish_end("finished")  # no communication after this: stop the watchdog
        return destroy(group)

    c10d.destroy_process_group = destroy_process_group
    dist.destroy_process_group = destroy_process_group

    import torch.autograd

    backward = torch.autograd.backward

    def guarded_backward(*args: Any, **kwargs: Any) -> Any:
        ring = guard.ring
        if (
            ring is None
            or not guard.enabled
            or getattr(guard.local, "depth", 0)
            or threading.current_thread() is not threading.main_thread()
        ):
            return backward(*args, **kwargs)
        where = guard.site()
        ring.enter_backward(where.site)
        buckets: list[dict[str, Any]] = []
        try:
            guard.record_ddp_buckets(where, buckets)
            result = backward(*args, **kwargs)
        except BaseException:
            for e in buckets:
                ring.finish(e, FAILED)
            raise
        finally:
            ring.leave_backward()
        for e in buckets:  # backward() returns once DDP has waited for every bucket
            ring.finish(e, DONE)
        return result

    torch.autograd.backward = guarded_backward

    work = c10d.Work
    wait = work.wait

    def guarded_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        return guard.on_wait(self, wait, args, kwargs)

    work.wait = guarded_wait
    _patch_funcol(guard)
    _patch_join(guard)
    if guard.options.ddp:
        _patch_ddp(guard)


def _patch_funcol(guard: Guard) -> None:
    """Functional collectives (what DTensor's redistributions, tensor/context/loss parallel
    issue): each call is an async op, its `wait_tensor` the wait. Their callers reach them as
    module attributes (`funcol.all_reduce(...)`), and `AsyncCollectiveTensor` waits through
    the module's `wait_tensor`, so replacing the module's functions sees both."""
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError:  # a torch without them
        return
    from commlint.guard.calls import FUNCOL

    for name in FUNCOL:
        original = getattr(funcol, name, None)
        if original is None or getattr(original, "__commlint_guard__", False):
            continue
        guard.originals[f"funcol.{name}"] = original
        setattr(funcol, name, guard.wrap_funcol(name, original))
    wait_tensor = funcol.wait_tensor
    if getattr(wait_tensor, "__commlint_guard__", False):
        return

    def guarded_wait_tensor(tensor: Any) -> Any:
        return guard.on_wait_tensor(tensor, wait_tensor)

    guarded_wait_tensor.__commlint_guard__ = True  # type: ignore[attr-defined]
    funcol.wait_tensor = guarded_wait_tensor


def _patch_creators(guard: Guard) -> None:
    """Group creation (`commlint.guard.groups`): fingerprinted across the parent group."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from commlint.guard.groups import CREATORS, wrap_creator

    for name in CREATORS:
        original = getattr(c10d, name, None)
        if original is None or getattr(original, "__commlint_guard__", False):
            continue
        wrapped = wrap_creator(guard, name, original)
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is original:
            setattr(dist, name, wrapped)
    try:
        from torch.distributed import device_mesh
    except ImportError:  # a torch without DeviceMesh
        return
    init = getattr(device_mesh, "init_device_mesh", None)
    if init is not None and not getattr(init, "__commlint_guard__", False):
        wrapped = wrap_creator(guard, "init_device_mesh", init)
        device_mesh.init_device_mesh = wrapped
        if getattr(dist, "init_device_mesh", None) is init:
            dist.init_device_mesh = wrapped
    mesh = getattr(device_mesh, "DeviceMesh", None)
    unflatten = getattr(mesh, "_unflatten", None)
    if unflatten is not None and not getattr(unflatten, "__commlint_guard__", False):
        mesh._unflatten = wrap_creator(guard, "_unflatten", unflatten)


def _patch_join(guard: Guard) -> None:
    """`Join` (and DDP's `join()`, which returns one) lets ranks that ran out of inputs shadow
    the others' collectives with collectives of their own — other ops, other sizes, from
    join.py — which match only as Join matches them. The guard stands down for the whole
    `with Join(...)` block on this thread, as if every call were made inside another guarded
    call: nothing is recorded or fingerprinted there, so the sequence numbers of every group
    still line up after it (Join leaves the ranks having issued the same collectives)."""
    try:
        from torch.distributed.algorithms.join import Join
    except ImportError:  # a torch without it
        return
    enter, leave = Join.__enter__, Join.__exit__
    if getattr(enter, "__commlint_guard__", False):
        return

    def guarded_enter(self: Any) -> Any:
        local = guard.local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            return enter(self)
        except BaseException:
            local.depth -= 1
            raise

    def guarded_exit(self: Any, *exc_info: Any) -> Any:
        try:
            return leave(self, *exc_info)
        finally:
            guard.local.depth -= 1

    guarded_enter.__commlint_guard__ = True  # type: ignore[attr-defined]
    Join.__enter__ = guarded_enter
    Join.__exit__ = guarded_exit


def _patch_ddp(guard: Guard) -> None:
    """DDP's reducer all-reduces gradient buckets in C++, out of the wrappers' sight, during
    `backward()`. A DDP forward that will sync gradients (not under `no_sync`) queues its
    module; the next `backward()` records one async all_reduce per bucket, in bucket order
    (the order the reducer launches them), complete when `backward()` returns
    (`Guard.record_ddp_buckets`). Nothing runs per bucket: a Python comm hook (the twin of
    the default C++ one) cost 7-10 % of a DDP step. A program that registers its own comm hook
    is recorded through the calls its hook makes instead. The broadcasts DDP makes before the
    module runs (`_pre_forward`) are recorded as one blocking broadcast
    (`Guard.record_ddp_sync`)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    register = DDP.register_comm_hook
    forward = DDP.forward
    pre_forward = getattr(DDP, "_pre_forward", None)  # torch 2.0 on

    def register_comm_hook(self: Any, state: object, hook: Any) -> Any:
        self.__dict__["_commlint_hooked"] = True
        return register(self, state, hook)

    def guarded_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = forward(self, *args, **kwargs)
        if (
            guard.enabled
            and not getattr(guard.local, "depth", 0)
            and not self.__dict__.get("_commlint_hooked")
            and getattr(self, "reducer", None) is not None
            and self.require_backward_grad_sync
            and torch.is_grad_enabled()
            and guard.started()
        ):
            guard.ddp_forward(self)
        return out

    def guarded_pre_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        # DDP's own collectives before the module runs (C++, unseen by the wrappers): the
        # bucket order synced once after the first backward, module buffers broadcast
        sync: list[dict[str, Any]] = []
        try:
            if guard.enabled and not getattr(guard.local, "depth", 0) and guard.started():
                guard.record_ddp_sync(self, sync)
            return pre_forward(self, *args, **kwargs)
        except BaseException:
            for e in sync:
                guard.ring.finish(e, FAILED)  # type: ignore[union-attr]
            raise
        finally:
            for e in sync:
                if e["state"] == PENDING:
                    guard.ring.finish(e, DONE)  # type: ignore[union-attr]

    init = DDP.__init__

    def guarded_init(self: Any, module: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            not guard.enabled
            or getattr(guard.local, "depth", 0)
            or not guard.started()
            or guard.ring is None
        ):
            return init(self, module, *args, **kwargs)
        try:
            call = _ddp_construction(guard, init, module, args, kwargs)
        except Exception:  # arguments torch itself will reject: let torch say so
            call = None
        if call is None:
            return guard.call_inner(init, (self, module, *args), kwargs)
        # checked and recorded before the constructor, complete at once: the constructor's
        # first run spends seconds importing (dynamo, DTensor), which is no wait on a peer
        label = "DDP() checks its parameters' shapes and broadcasts them"
        guard.run(call, _nothing, (), {}, label)
        return guard.call_inner(init, (self, module, *args), kwargs)

    DDP.__init__ = guarded_init
    DDP.register_comm_hook = register_comm_hook
    DDP.forward = guarded_forward
    if pre_forward is not None:
        DDP._pre_forward = guarded_pre_forward


def _nothing() -> None:
    return None


def _ddp_construction(guard: Guard, init: Any, module: Any, args: tuple, kwargs: dict) -> Any:
    """DDP's constructor as one blocking broadcast on its group from its first rank: every
    member checks the parameters' shapes against the others' and broadcasts them (C++). Its
    fingerprint carries the parameters' total size, so ranks that built different models (a
    vocabulary from each rank's own shard) stop with CL204 at the user's `DDP(...)` line, and
    a rank that never builds it is told apart by the sequence numbers that follow."""
    import inspect
    from types import SimpleNamespace

    from commlint.guard.calls import Call

    bound = inspect.signature(init).bind_partial(None, module, *args, **kwargs).arguments
    group = bound.get("process_group")
    if bound.get("device_mesh") is not None:
        group = bound["device_mesh"].get_group()
    ignore = set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()) or ())
    params = [p for n, p in module.named_parameters() if n not in ignore]
    if not params:
        return None
    _, members = guard.group_of(group)
    total = sum(int(p.numel()) for p in params)
    size = SimpleNamespace(shape=(total,), dtype=params[0].dtype)
    return Call(op="broadcast", group=group, is_async=False, root=members[0], tensor=size)


def _user_site(tb: Any) -> str | None:
    """The innermost frame of the user's program in a traceback (`commlint.callsites`)."""
    from commlint.callsites import is_user_file
    from commlint.guard.core import short_path

    site = None
    for frame in traceback.extract_tb(tb):
        if is_user_file(frame.filename):
            site = f"{short_path(frame.filename)}:{frame.lineno}"
    return site


def record_exception(exc: BaseException) -> None:
    """Tell the other ranks this one is leaving because of `exc` (SystemExit included)."""
    guard = _GUARD
    if guard is None or guard.ring is None:
        return
    if isinstance(exc, SystemExit):
        code = exc.code
        if code in (None, 0):
            guard.publish_end("finished")
        else:
            guard.publish_end("exit", f"exit code {code}", _user_site(exc.__traceback__))
        return
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    guard.publish_end("exception", f"{type(exc).__name__}: {first}", _user_site(exc.__traceback__))


def _at_exit() -> None:
    if _GUARD is not None:
        _GUARD.publish_end("finished")
        _GUARD.stop_answers()  # also after a degrade, which skips publish_end
