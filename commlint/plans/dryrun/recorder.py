"""Inside one simulated rank: the `Recorder`, the rank's recording state and its channel to
the parent (every recorded action, end and file hand-over is a message `send` carries), and
`RecordedWork`, the handle a recorded call returns.

`Recorder` is installed in a forked child before the user's script runs. The calls reach it
through the recording process group (`process_group.py`) and, for functional collectives on
fake tensors, the dispatch-level recorder (`functional.py`); where a call comes from is
`sites.py`'s, which values the rank knows and which are uniform is `provenance.py`'s. The names
those modules define that the rest of the dry-run used from here are re-exported below.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.futures import Future

from commlint.callsites import USER_PROGRAMS as USER_PROGRAMS
from commlint.plans.dryrun import fingerprint
from commlint.plans.dryrun.provenance import (
    SMALL_REAL,
    UNIFORM,
    DataDependentSize,
    _mark_uniform,
    forget,
    is_uniform,
    know,
    sized,
)
from commlint.plans.dryrun.sites import (
    _ASYNC_APIS,
    BACKEND,
    StopRank,
    _api_and_caller,
    _c10d_api,
    _cpp_origin,
    _frames,
    _open,
    _stat,
    framework_frame,
    is_user_file,
    short_path,
    user_site,
)
from commlint.plans.dryrun.values import (
    MAX_FILE_BYTES,
    Key,
    ValueTable,
    WrittenFiles,
)
from commlint.trace import TORCH_ISSUED


def _on_the_gpu_for_nccl(api: str, tensors: list[Any], frames: list[Any]) -> None:
    """A tensor the program gives a collective of an NCCL-only group from its own code is
    on a GPU, or the GPUs raise here (torch has no CPU backend for that group): as they do.
    Only the program's own calls are checked, and only tensors its own code made on (or
    moved to) the CPU (`devices.on_the_cpu`): one torch or a framework made may be on the GPU
    in the real job though it reports the CPU here."""
    from commlint.plans.dryrun import devices

    _, caller = _api_and_caller(frames)
    if caller is None or not is_user_file(caller.f_code.co_filename):
        return
    for t in tensors:
        if isinstance(t, torch.Tensor) and devices.on_the_cpu(t):
            raise RuntimeError(
                f"No backend type associated with device type cpu: {api} of a CPU tensor on "
                "a group whose only backend is NCCL (move it to the GPU first, e.g. "
                "`.cuda()` or `device=`, or give the group a CPU backend: "
                '`backend="cpu:gloo,cuda:nccl"`)'
            )


class _Shared:
    """Objects that hold (or reach) the rank's pipe to the parent are shared by copies:
    `copy.deepcopy(model)` (EMA/teacher copies, pipeline-stage splits) must never copy the
    pipe — a copied `Connection` closes the real descriptor when it is collected, and the
    rank can no longer report anything."""

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self


class RecordedWork(_Shared, dist.Work):
    """The work handle of a recorded call: complete at once; waiting on it is an action."""

    def __init__(self, recorder: Recorder, handle: str | None, result: list[torch.Tensor]):
        super().__init__()
        self._recorder = recorder
        self._handle = handle
        self._result = result
        self._waited = handle is None
        self._source = 0

    def wait(self, timeout: Any = None) -> bool:
        if not self._waited:
            self._waited = True
            self._recorder.emit({"op": "wait", "handles": [self._handle]})
        return True

    def get_future(self) -> Future:
        # DDP waits for its buckets in C++ at the end of backward: record that wait before
        # the rank's next action.
        if not self._waited:
            self._waited = True
            self._recorder.deferred_waits.append(self._handle)
        fut: Future = Future()
        fut.set_result(self._result)
        return fut

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> list[torch.Tensor]:
        return self._result

    def source_rank(self) -> int:
        """The group rank a receive got its message from (`recv(src=None)` returns it)."""
        return self._source

    _source_rank = source_rank  # the name torch's recv(src=None) calls

    def synchronize(self) -> None:
        return None


class Recorder(_Shared):
    """Per-rank recording state. `send` is how messages reach the parent."""

    def __init__(self, rank: int, world_size: int, table: ValueTable, send: Callable) -> None:
        self.rank = rank
        self.world_size = world_size
        self.table = table
        self.send = send
        self.torch_names: dict[str, tuple[str, list[int]]] = {}
        self.group_counts: dict[tuple[int, ...], int] = {}
        self.seq: dict[str, int] = {}
        self.p2p_seq: dict[tuple, int] = {}
        self.handles = 0
        self.batches = 0
        self.batch: str | None = None
        self.deferred_waits: list[str] = []
        self.requested_backend: str | None = None
        self.group_backends: dict[str, str] = {}  # torch group name -> backend asked for
        self.from_cpp = False
        self.live: Callable[[Key, list[int]], dict[int, Any] | None] | None = None
        self.uniform_made = False  # a collective over every rank delivered a fake tensor
        self.bucket = 0  # index of the next DDP gradient bucket in this backward
        self.stream: str | None = None
        self.functional_handles: dict[int, str] = {}
        self.functional_waited: set[str] = set()
        # the rank's view of the filesystem (`files.FileView`), handed over at barriers
        self.written: set[str] = set()  # files this rank wrote since its last barrier
        self.removed: set[str] = set()  # files and folders it removed since then
        self.made: set[str] = set()  # folders it made since then
        self.dirs: set[str] = set()  # folders that exist for this rank only
        self.delivered: dict[str, bytes] = {}  # files other ranks wrote before a barrier
        # a file this rank appended to, or wrote to after a barrier handed it over: its own
        # copy (a scratch path), which the next barrier's merged version replaces
        self.private: dict[str, str] = {}
        self.gone: set[str] = set()  # files and folders removed for this rank (not on disk)

    def take_written(self) -> WrittenFiles | None:
        """The files written, removed and folders made since the last barrier, as they are
        now; starts a new epoch."""
        if not self.written and not self.removed and not self.made:
            return None
        files = []
        for path in sorted(self.written):
            if path not in self.private:  # a handed-over file it renamed
                if path in self.delivered:
                    files.append((path, self.delivered[path]))
                continue
            try:
                where = self.private[path]
                size = _stat(where).st_size
                with _open(where, "rb") as fh:
                    files.append((path, fh.read() if size <= MAX_FILE_BYTES else None))
            except OSError:
                continue
        removed, made = tuple(sorted(self.removed)), tuple(sorted(self.made))
        self.written, self.removed, self.made = set(), set(), set()
        return WrittenFiles(tuple(files), removed, made) if files or removed or made else None

    # -- messages --------------------------------------------------------------------------

    def emit(self, action: dict[str, Any], frames: list[Any] | None = None) -> None:
        if action.get("op") != "wait":
            self.flush()
        if threading.current_thread() is not threading.main_thread():
            action["thread"] = threading.current_thread().name
        if self.stream is not None:
            action["stream"] = self.stream
        frames = frames if frames is not None else _frames()
        site, stack = user_site(frames)
        if site:
            action["site"] = site
            action["stack"] = stack
            via = framework_frame(frames)
            if via:
                action["via"] = via
        self.send(("a", action))

    def flush(self) -> None:
        """Record DDP's deferred bucket waits (see `RecordedWork.get_future`), if any."""
        if self.deferred_waits:
            handles, self.deferred_waits = self.deferred_waits, []
            self.send(("a", {"op": "wait", "handles": handles, "label": "DDP bucket wait"}))

    def new_group(self, torch_name: str, ranks: list[int]) -> str:
        if len(ranks) == self.world_size and not self.torch_names:
            name = "WORLD"
        else:
            name = "g" + _compact(ranks)
            count = self.group_counts.get(tuple(ranks), 0) + 1
            self.group_counts[tuple(ranks)] = count
            if count > 1:
                name += f"#{count}"
            self.send(("g", name, list(ranks)))
        self.torch_names[torch_name] = (name, list(ranks))
        return name

    def next_handle(self) -> str:
        self.handles += 1
        return f"h{self.handles}"

    def contribute(self, key: Key, value: Any) -> None:
        if value is not None:
            self.send(("v", key, value))
        elif self.live is not None:
            self.send(("v0", key))  # sent nothing: a peer waiting for it need not wait

    def receive(self, key: Key, senders: list[int] | None = None) -> dict[int, Any]:
        """What the other ranks sent for `key`: asked live of the parent when the senders
        are known and the pass runs them at once (`channel.Live`), else the previous pass's."""
        others = [r for r in senders or () if r != self.rank]
        got = self.live(key, others) if self.live is not None and others else None
        if got is not None:
            now = ValueTable({key: dict(got)}, exact_model=self.table.exact_model)
            self.send(("r", key, now.signature(key, self.rank)))
            return got
        self.send(("r", key, self.table.signature(key, self.rank)))
        return {r: v for r, v in self.table.contributions(key).items() if r != self.rank}

    # -- recording one call -----------------------------------------------------------------

    def _nccl_only(self, group: str) -> bool:
        """Whether the program asked for NCCL alone on this group (the default group's
        backend, or new_group's): it takes no CPU tensor."""
        backends = {
            str(self.group_backends.get(name, "")).lower()
            for name, (label, _) in self.torch_names.items()
            if label == group
        }
        return backends == {"nccl"}

    def record(
        self,
        op: str,
        group: str,
        tensors: list[torch.Tensor],
        *,
        frames: list[Any],
        peer: int | None = None,
        root: int | None = None,
        tag: int = 0,
        reduce_op: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str | None:
        """Emit the action (`frames`: the caller's stack); return its handle when the caller
        gets an async work."""
        unsized = next((t for t in tensors if not sized(t)), None)
        if unsized is not None:
            raise DataDependentSize(
                f"the tensor given to {op} has a data-dependent size "
                f"{tuple(unsized.shape)} (nonzero, unique, bincount, a boolean mask): fake "
                "tensors do not know how many elements each rank sends"
            )
        api, local, caller = _c10d_api(frames)
        if api is not None and caller is None and tensors and self._nccl_only(group):
            _on_the_gpu_for_nccl(api, tensors, frames)
        action: dict[str, Any] = {"op": op, "group": group}
        handle = None
        self.from_cpp = api is None
        if api is None and _cpp_origin(frames) == "functional collective":
            # A functional collective of real tensors (a small count): its Work completes at
            # once, so torch never registers it for `wait_tensor`, and the result is waited
            # for before any use (AsyncCollectiveTensor): the blocking call it amounts to.
            action["label"] = "functional collective"
        elif api is None:
            # Issued from C++ (DDP's reducer, functional collectives): asynchronous, waited
            # through its Work or future.
            handle = self.next_handle()
            action["async"] = True
            action["handle"] = handle
            action["label"] = _cpp_origin(frames)
            if action["label"] == "DDP gradient bucket":
                action["bucket"] = self.bucket
                self.bucket += 1
        elif op in ("send", "recv"):
            if api in _ASYNC_APIS or self.batch:
                handle = self.next_handle()
                action["op"] = "i" + op
                action["handle"] = handle
        elif local.get("async_op") or (api == "_coalescing_manager" and local.get("async_ops")):
            handle = self.next_handle()
            action["async"] = True
            action["handle"] = handle
        if api and api not in {op, "i" + op} and not api.startswith("_"):
            action.setdefault("label", api)
        if caller is not None:
            label = action.get("label")
            issued = f"{TORCH_ISSUED} ({caller})"
            action["label"] = f"{label}, {issued}" if label else issued
        if self.batch and op in ("send", "recv"):
            action["batch"] = self.batch
        if peer is not None:
            action["peer"] = peer
        if root is not None:
            action["root"] = root
        if tag:
            action["tag"] = tag
        if reduce_op:
            action["reduce_op"] = reduce_op
        if len(tensors) > 1:  # coalesced: one op over several tensors
            if all(sized(t) for t in tensors):
                action["bytes"] = sum(t.numel() * t.element_size() for t in tensors)
            action["dtype"] = str(tensors[0].dtype).removeprefix("torch.")
            action["label"] = f"coalesced, {len(tensors)} tensors"
        elif tensors:
            t = tensors[0]
            if sized(t):  # a data-dependent size is not known: the checker takes any size
                action["shape"] = list(t.shape)
            action["dtype"] = str(t.dtype).removeprefix("torch.")
        if extra:
            action.update(extra)
        self.emit(action, frames)
        return handle

    def sync(self, label: str) -> None:
        self.emit({"op": "sync", "label": label}, _frames(3))

    def filled_alike(self, group_size: int, outputs: Any) -> None:
        """A collective that gives every member the same result (all_reduce, broadcast,
        all_gather) filled `outputs`: over every rank, they hold the same value everywhere."""
        if group_size == self.world_size:
            self.uniform_made = True
            _mark_uniform(outputs)
            fingerprint.delivered_alike(outputs)


def _compact(ranks: list[int]) -> str:
    rs = sorted(ranks)
    if rs == list(range(rs[0], rs[-1] + 1)) and len(rs) > 2:
        return f"{rs[0]}-{rs[-1]}"
    return "_".join(str(r) for r in ranks)


def merge_writes(versions: list[bytes]) -> bytes:
    """A file as several members left it before a barrier, each from the same start: the
    start (their common prefix), then what each appended, in rank order — one of the orders a
    real run can give (identical versions stay as they are)."""
    lo, hi = min(versions), max(versions)  # the common prefix of all is theirs
    n = next((i for i, (a, b) in enumerate(zip(lo, hi, strict=False)) if a != b), len(lo))
    return lo[:n] + b"".join(v[n:] for v in versions)


__all__ = [
    "BACKEND",
    "SMALL_REAL",
    "UNIFORM",
    "USER_PROGRAMS",
    "RecordedWork",
    "Recorder",
    "StopRank",
    "forget",
    "framework_frame",
    "is_uniform",
    "is_user_file",
    "know",
    "merge_writes",
    "short_path",
    "sized",
    "user_site",
]
