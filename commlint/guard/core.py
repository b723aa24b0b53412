"""The guard of one rank: wraps `torch.distributed`, records, checks fingerprints.

Everything the ranks tell each other goes through a side channel — a TCPStore client of the
job's own store (MASTER_ADDR/MASTER_PORT, as torchrun and most launchers set them; else the
default process group's store) under a key prefix of its own — never through the backend
the program uses, so a wedged backend cannot wedge the guard.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from commlint.callsites import CallSite, call_site_at
from commlint.guard import answers, templates
from commlint.guard.calls import Call, describe, describe_funcol, splits_agree
from commlint.guard.frames import _brief, short_path
from commlint.guard.ring import DONE, FAILED, PENDING, Ring

# Fingerprint slots per group / p2p channel (overwritten in turn: the store stays small).
FP_KEEP = 64
# `--check auto`: how long a call whose fingerprint follows a path not yet seen matched waits
# for its peers' fingerprints before it goes on (a peer blocked elsewhere costs this, once).
FP_WAIT = 1.0
FP_TEXTS = 4096  # fingerprint texts kept per rank (`Guard.fp_text`), one per group and site
FP_IDS = 65536  # distinct fingerprints named by an int (`Guard.fp_record`)


@dataclass
class _Stream:
    """`--check auto`'s memory of one group's (or p2p channel's) calls on this rank."""

    prev: tuple | None = None  # the previous call's fingerprint
    prev_matched: bool = True  # ... seen equal on every member (or trusted)
    # (previous fingerprint, fingerprint) pairs seen matched on every member, in turn
    verified: set[tuple[tuple | None, tuple]] = field(default_factory=set)

    def trusted(self, key: tuple) -> bool:
        return (self.prev, key) in self.verified

    def step(self, key: tuple, matched: bool) -> None:
        if matched and self.prev_matched:
            self.verified.add((self.prev, key))
        self.prev, self.prev_matched = key, matched


class CommlintGuardError(RuntimeError):
    """Raised on every member of a collective whose members disagree (CL203/CL204)."""


@dataclass
class Options:
    """What the guard does; from flags (`python -m commlint.guard`) or the environment."""

    timeout: float = 10.0
    check: str = "auto"  # auto | all | sample:N | off
    save_trace: str | None = None
    ring_size: int = 512
    ddp: bool = True
    kill_stalled: bool = False  # end the job on a stall no finding proves (after one report)

    @classmethod
    def from_env(cls) -> Options:
        env = os.environ
        return cls(
            timeout=float(env.get("COMMLINT_GUARD_TIMEOUT", "10")),
            check=env.get("COMMLINT_GUARD_CHECK", "auto"),
            save_trace=env.get("COMMLINT_GUARD_SAVE_TRACE") or None,
            ring_size=int(env.get("COMMLINT_GUARD_RING", "512")),
            ddp=env.get("COMMLINT_GUARD_DDP", "1") not in ("0", "false", "no"),
            kill_stalled=env.get("COMMLINT_GUARD_KILL_STALLED", "0") in ("1", "true", "yes"),
        )

    def sample_every(self) -> int:
        """0: no fingerprint checks; N: check every N-th collective of each group."""
        if self.check == "off":
            return 0
        if self.check in ("all", "auto"):
            return 1
        if self.check.startswith("sample:"):
            n = int(self.check.split(":", 1)[1])
            if n >= 1:
                return n
        raise ValueError(f"--check must be auto, all, sample:N (N ≥ 1) or off, not {self.check!r}")


class Guard:
    """Per-process guard state. One instance, made by `commlint.guard.install()`."""

    def __init__(self, options: Options) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.options = options
        self.every = options.sample_every()
        self.adaptive = options.check == "auto"
        self.streams: dict[str, _Stream] = {}
        # (group, site) -> a fingerprint without its sequence number, its key, its JSON text
        self.fp_texts: dict[tuple[str, Any], tuple[dict[str, Any], tuple, str, int]] = {}
        self.fp_ids: dict[tuple, int] = {}
        # a call's ring entry once per kind of call and line (`commlint.guard.templates`)
        self.templates: dict[tuple, tuple] = {}
        self.main_thread = threading.main_thread().ident
        self.ring: Ring | None = None
        self.rank = -1
        self.world_size = 0
        self.backend = ""
        self.local = threading.local()
        self.groups: dict[int, tuple[str, list[int]]] = {}
        self.works: dict[int, tuple[Any, dict[str, Any]]] = {}
        # functional collectives' pending results: id(tensor) -> (weak ref, entry)
        self.tensors: dict[int, tuple[Any, dict[str, Any]]] = {}
        self.prefix = "commlint_guard/{}/{}/".format(
            os.environ.get("TORCHELASTIC_RUN_ID", "job"),
            os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"),
        )
        self.ended = False
        self.leaving = False
        # False: calls pass straight through (the overhead bench compares both in one job)
        self._enabled = True
        # why the side channel failed (then every call passes straight through), or None
        self.degraded: str | None = None
        # the text of the verdict this rank raised or printed (the summary), once there is one
        self.verdict_text: str | None = None
        self.fp_seconds = 0.0  # time spent on the side channel's fingerprints (bench figure)
        self.fp_calls = 0
        self.fp_trusted = 0  # of which only published (`--check auto`, a path seen matched)
        self.watchdog: Any = None
        self.answerer: Any = None  # `--check auto`: replies to peers' fingerprint requests
        # stream -> the first sequence number a peer asked for that this rank has not reached:
        # the main thread publishes that call's fingerprint when it makes it
        self.wanted: dict[str, set[int]] = {}
        self.originals: dict[str, Any] = {}
        self._start_lock = threading.Lock()
        # DDP modules whose forward ran since the last backward() and will sync gradients
        self.ddp_pending: list[Any] = []

    @property
    def enabled(self) -> bool:
        """Calls are recorded and checked: on (unless the bench turned it off) and not degraded."""
        return self._enabled and self.degraded is None

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._enabled = value

    def degrade(self, why: str) -> None:
        """A guard operation failed (the store's host left, a thread died): say so in one line
        and let the program go on exactly as unguarded — the guard must never break a job."""
        if self.degraded is not None or self.leaving:
            return
        self.degraded = why
        with contextlib.suppress(Exception):
            print(f"commlint guard degraded: {why}", file=sys.stderr, flush=True)
        self.ended = True  # the watchdog stops at its next turn
        w = self.watchdog
        if w is not None:
            w.wake.set()

    # -- side channel -------------------------------------------------------------------------

    def store(self) -> Any:
        """This thread's client of the side channel (clients are not shared across threads)."""
        s = getattr(self.local, "store", None)
        if s is None:
            s = self.local.store = self.new_store()
        return s

    def new_store(self) -> Any:
        dist = self.dist
        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if addr and port:
            base = dist.TCPStore(addr, int(port), is_master=False, timeout=timedelta(seconds=30))
        else:
            base = dist.distributed_c10d._get_default_store()
        return dist.PrefixStore(self.prefix, base)

    # -- start ----------------------------------------------------------------------------

    def started(self) -> bool:
        """Learn rank and world size once the default group exists; start the watchdog."""
        if self.ring is not None:
            return True
        dist = self.dist
        if not dist.is_initialized():
            return False
        with self._start_lock:
            if self.ring is None:
                self.rank = dist.get_rank()
                self.world_size = dist.get_world_size()
                self.backend = str(dist.get_backend())
                ring = Ring(self.rank, self.options.ring_size)
                from commlint.guard.watchdog import Watchdog

                self.watchdog = Watchdog(self, ring)
                self.ring = ring
                try:
                    # this thread's client now, while the store's host surely is up (a client
                    # made after it left would retry its connection for the whole timeout)
                    self.store()
                except Exception as exc:
                    self.degrade(f"cannot reach the job's store: {_brief(exc)}")
                    return True
                self.watchdog.start()
                if self.adaptive:
                    self.answerer = answers.Answerer(self)
                    self.answerer.start()
        return True

    # -- groups and sites ---------------------------------------------------------------------

    def group_of(self, pg: Any) -> tuple[str, list[int]]:
        dist = self.dist
        if pg is None or pg is dist.GroupMember.WORLD:
            return "WORLD", list(range(self.world_size))
        known = self.groups.get(id(pg))
        if known is None:
            ranks = dist.get_process_group_ranks(pg)
            if ranks == list(range(self.world_size)) and pg is dist.group.WORLD:
                name = "WORLD"
            else:
                name = f"pg{getattr(pg, 'group_name', id(pg))}"
            known = self.groups[id(pg)] = (name, ranks)
        return known

    def site(self, depth: int = 2) -> CallSite:
        """Where the call `depth` frames up from here was made: the innermost frame of the
        user's program (not an installed package, the standard library, torch or commlint),
        the user's frames outward, and the framework frame that made the call, if one did
        (`commlint.callsites`, as the dry-run names it)."""
        return call_site_at(sys._getframe(depth), short_path, depth=4)

    # -- recording ------------------------------------------------------------------------

    def entry(self, call: Call) -> tuple[dict[str, Any], str]:
        name, ranks = self.group_of(call.group)
        e: dict[str, Any] = {"op": call.op, "group": name, "state": PENDING}
        if self.rank not in ranks:
            e["nonmember"] = True
        t = call.tensor
        if t is not None and hasattr(t, "shape"):
            e["shape"] = list(t.shape)
            dtype = t.dtype
            dtype_name = _DTYPES.get(dtype)
            if dtype_name is None:
                dtype_name = _DTYPES[dtype] = str(dtype).removeprefix("torch.")
            e["dtype"] = dtype_name
        if call.reduce_op:
            e["reduce_op"] = call.reduce_op
        if call.in_splits is not None and call.out_splits is not None:
            e["in_splits"], e["out_splits"] = call.in_splits, call.out_splits
        if call.p2p:
            e["peer"] = call.root
            if call.tag:
                e["tag"] = call.tag
            src, dst = (self.rank, call.root) if call.p2p == "send" else (call.root, self.rank)
            key = f"p2p:{name}:{src}>{dst}:{call.tag}"
        else:
            if call.root is not None:
                e["root"] = call.root
            key = f"coll:{name}"
        if call.is_async:
            e["async"] = True
            if self.ring is not None and self.ring.backward_since is not None:
                e["bwd"] = self.ring.backward_id
        if threading.get_ident() != self.main_thread:
            e["thread"] = threading.current_thread().name
        return e, key

    # -- DDP's gradient buckets (see `commlint.guard._patch_ddp`) ---------------------------

    # the first forwards read the module's buckets again: DDP rebuilds them once, in the
    # second iteration's forward, in the order the gradients became ready
    DDP_BUCKET_READS = 4
    # up to this many bytes of gradients, the buckets are read exactly from the reducer (which
    # allocates zeros of their size); above, from DDP's logging data, which allocates nothing
    # and shows the rebuilt buckets one forward late
    DDP_BUCKET_PROBE_BYTES = 64 << 20

    def ddp_forward(self, ddp: Any) -> None:
        """A DDP forward that will sync gradients: its buckets are all-reduced in the next
        backward(). Reads (and caches) their sizes: one flat tensor per bucket."""
        if not any(m is ddp for m in self.ddp_pending):
            self.ddp_pending.append(ddp)
        reads, _ = ddp.__dict__.get("_commlint_buckets", (0, None))
        if reads >= self.DDP_BUCKET_READS:
            return
        try:
            buckets = _ddp_buckets(ddp, self.DDP_BUCKET_PROBE_BYTES)
        except Exception:  # another torch's DDP: its bucket all-reduces stay unrecorded
            buckets = []
        ddp.__dict__["_commlint_buckets"] = (reads + 1, buckets)

    def record_ddp_sync(self, ddp: Any, out: list[dict[str, Any]]) -> None:
        """Before a DDP forward: when DDP will broadcast from its group's first rank — the
        bucket order, in the first forward after the first backward (unless it finds unused
        parameters), or its module buffers — one blocking broadcast entry (appended to
        `out`), fingerprinted: a peer blocked in another call is then seen waiting on this
        rank, and this rank on it."""
        import torch

        ring = self.ring
        if ring is None or threading.current_thread() is not threading.main_thread():
            return
        what = []
        d = ddp.__dict__
        if (
            torch.is_grad_enabled()
            and d.get("_commlint_backwards", 0) > 0
            and not getattr(ddp, "_has_rebuilt_buckets", True)
            and (getattr(ddp, "static_graph", False) or not ddp.find_unused_parameters)
        ):
            what.append("bucket order")
        try:
            if ddp._check_sync_bufs_pre_fwd():
                what.append("module buffers")
        except Exception:  # another torch's DDP: its buffer sync stays unrecorded
            pass
        if not what:
            return
        name, members = self.group_of(ddp.process_group)
        where = self.site(3)
        e: dict[str, Any] = {
            "op": "broadcast",
            "group": name,
            "state": PENDING,
            "root": members[0],
            "label": f"DDP forward syncs its {' and '.join(what)} from rank {members[0]}",
        }
        _place(e, where)
        out.append(ring.add(e, f"coll:{name}"))
        if self.rank in members:
            call = Call(op="broadcast", group=ddp.process_group, is_async=False, root=members[0])
            self.sampled_fingerprint(e, call)
        ring.block(e)

    def record_ddp_buckets(self, where: CallSite, out: list[dict[str, Any]]) -> None:
        """At backward(): one async all_reduce entry per bucket of each queued DDP module, in
        bucket order (appended to `out`), pending until backward() returns; each one
        fingerprinted as a `dist.*` call is (the reducer launches them inside backward(): a
        peer in another collective is told here, before gloo aborts on the sizes)."""
        pending, self.ddp_pending = self.ddp_pending, []
        ring = self.ring
        if not pending or ring is None:
            return
        for ddp in pending:
            ddp.__dict__["_commlint_backwards"] = ddp.__dict__.get("_commlint_backwards", 0) + 1
            name, members = self.group_of(ddp.process_group)
            call = Call(op="all_reduce", group=ddp.process_group, is_async=True)
            for k, (numel, dtype) in enumerate(ddp.__dict__.get("_commlint_buckets", (0, []))[1]):
                e: dict[str, Any] = {
                    "op": "all_reduce",
                    "group": name,
                    "state": PENDING,
                    "shape": [numel],
                    "dtype": dtype,
                    "async": True,
                    "bwd": ring.backward_id,
                    "handle": ring.new_handle(),
                    "label": f"DDP gradient bucket {k}",
                }
                _place(e, where)
                out.append(ring.add(e, f"coll:{name}"))
                if self.rank in members:
                    self.sampled_fingerprint(e, call)

    def sampled_fingerprint(self, e: dict[str, Any], call: Call) -> None:
        """`fingerprint` when `--check` samples this call (timed for the overhead bench)."""
        if not self.every or e["seq"] % self.every:
            return
        t0 = time.perf_counter()
        try:
            self.fingerprint(e, call)
        except CommlintGuardError:
            raise
        except Exception as exc:
            self.degrade(f"fingerprint check failed: {_brief(exc)}")
        finally:
            self.fp_seconds += time.perf_counter() - t0
            self.fp_calls += 1

    def wrap(self, name: str, fn: Any) -> Any:
        guard = self

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            # `guard.enabled` and `guard.started()`, inline: this runs on every call
            if (
                not guard._enabled
                or guard.degraded is not None
                or getattr(guard.local, "depth", 0)
                or (guard.ring is None and not guard.started())
            ):
                return fn(*args, **kwargs)
            try:
                call = describe(name, fn, args, kwargs, guard.dist)
            except Exception:  # arguments torch itself will reject: let torch say so
                call = None
            if call is None:
                return guard.call_inner(fn, args, kwargs)
            return guard.run(call, fn, args, kwargs, name)

        guarded.__commlint_guard__ = True  # type: ignore[attr-defined]
        return guarded

    def wrap_funcol(self, name: str, fn: Any) -> Any:
        """A functional collective (DTensor's redistributions, TP/CP/loss parallel): recorded
        as an async op; its `wait_tensor` (see `on_wait_tensor`) is the wait."""
        guard = self

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            local = guard.local
            if (
                not guard.enabled
                or getattr(local, "depth", 0)
                or not guard.started()
                or _tracing()  # inside torch.compile: the compiled graph's calls are not seen
            ):
                return fn(*args, **kwargs)
            try:
                call = describe_funcol(name, fn, args, kwargs, guard.dist)
            except Exception:  # a group form the guard cannot resolve: let torch say so
                call = None
            if call is None:
                return guard.call_inner(fn, args, kwargs)
            result = guard.run(call, fn, args, kwargs, name, keep=False)
            e = getattr(local, "last_async", None)
            local.last_async = None
            if e is not None:
                # the AsyncCollectiveTensor's payload is what `wait_tensor` is called with
                out = getattr(result, "elem", result)
                with contextlib.suppress(TypeError):  # not weak-referenceable: not tracked
                    guard.tensors[id(out)] = (weakref.ref(out), e)
                    if len(guard.tensors) > 4 * guard.ring.entries.maxlen:  # type: ignore[union-attr,operator]
                        guard.tensors = {
                            k: v for k, v in guard.tensors.items() if v[0]() is not None
                        }
            return result

        guarded.__commlint_guard__ = True  # type: ignore[attr-defined]
        return guarded

    def on_wait_tensor(self, tensor: Any, wait: Any) -> Any:
        """`wait_tensor` of a functional collective this guard recorded: a blocking wait."""
        known = self.tensors.pop(id(tensor), None) if self.enabled else None
        if known is None or known[0]() is not tensor or self.ring is None:
            return wait(tensor)
        return self.wait_for(known[1], wait, (tensor,), {})

    def explain_peer_failure(self, e: dict[str, Any]) -> None:
        """The backend says a peer is gone: if a peer recorded its exit (an exception, an exit
        code, or a normal end), run the checker on this rank's ring and theirs and print who
        stranded this call, and where (CL210/CL202), before the exception propagates."""
        try:
            ring = self.ring
            assert ring is not None
            store = self.store()
            states: dict[int, dict[str, Any]] = {}
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and not states:
                for r in range(self.world_size):
                    if r != self.rank and store.check([f"end/{r}"]):
                        s = json.loads(store.get(f"end/{r}"))
                        s["status"] = "ended"
                        states[r] = s
                if not states:
                    time.sleep(0.05)
            if not states:
                return
            mine = ring.snapshot()
            mine.update(status="blocked", inflight=e, blocked_for=0.0)
            mine["groups"] = {name: ranks for name, ranks in self.groups.values()}
            states[self.rank] = mine
            for r in range(self.world_size):
                states.setdefault(r, {"status": "running"})
            from commlint.guard.diagnose import diagnose

            d = diagnose(states, self.world_size, self.backend)
            mine_found = [f for f in d.hang if self.rank in f.ranks]
            for f in mine_found:
                print(f"commlint guard: {f.code} {f.name}: {f.message}", file=sys.stderr)
            sys.stderr.flush()
        except Exception:  # explaining must never hide the real error
            pass

    def hold_if_leaving(self) -> None:
        """A call that fails because a peer left after a diagnosed hang: the watchdog is about
        to end this process with the diagnosis; a traceback of the side effect would only bury
        it."""
        if self.leaving:
            time.sleep(30)

    def call_inner(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        local = self.local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            return fn(*args, **kwargs)
        finally:
            local.depth -= 1

    def run(
        self, call: Call, fn: Any, args: tuple, kwargs: dict, api: str, keep: bool = True
    ) -> Any:
        """Record, fingerprint and make the call. An async op's handle object is kept for
        its `wait()` when `keep` (a `Work`); else its entry is left in `local.last_async`."""
        ring = self.ring
        assert ring is not None
        try:
            # from the frame that called this outward (as `site()` walks)
            e, key, kid = templates.record(self, call, api, sys._getframe(1))
            ring.add(e, key)
        except Exception as exc:  # the guard's own failure: the call goes on unguarded
            self.degrade(f"recording failed: {_brief(exc)}")
            return self.call_inner(fn, args, kwargs)
        if self.every and not e.get("nonmember") and e["seq"] % self.every == 0:
            t0 = time.perf_counter()
            try:
                if call.p2p:
                    if call.root is not None and not call.obj:
                        self.p2p_fingerprint(e, call, key)
                else:
                    self.fingerprint(e, call, kid)
            except CommlintGuardError:
                raise
            except Exception as exc:  # the side channel failed: go on as unguarded
                self.degrade(f"fingerprint check failed: {_brief(exc)}")
            finally:
                self.fp_seconds += time.perf_counter() - t0
                self.fp_calls += 1
        if not call.is_async:
            ring.block(e)
        try:
            result = self.call_inner(fn, args, kwargs)
        except BaseException as exc:
            self.hold_if_leaving()
            if _peer_gone(exc):
                self.explain_peer_failure(e)
            ring.finish(e, FAILED)
            raise
        if call.is_async and not keep:
            self.local.last_async = e
        elif call.is_async and result is not None:
            with ring.lock:
                ring.works[e["handle"]] = result
            self.works[id(result)] = (result, e)
            if len(self.works) > 4 * ring.entries.maxlen:  # type: ignore[operator]
                self.prune_works()
        else:
            ring.finish(e, DONE)
        return result

    def prune_works(self) -> None:
        ring = self.ring
        assert ring is not None
        with ring.lock:
            live = set(ring.works)
        self.works = {k: v for k, v in self.works.items() if v[1].get("handle") in live}

    def on_wait(self, work: Any, wait: Any, args: tuple, kwargs: dict) -> Any:
        """`Work.wait` of an op this guard recorded: a `wait` action, blocking."""
        depth = getattr(self.local, "depth", 0)
        known = self.works.pop(id(work), None) if self.enabled and not depth else None
        if known is None or known[0] is not work or self.ring is None:
            return wait(work, *args, **kwargs)
        return self.wait_for(known[1], wait, (work, *args), kwargs)

    def wait_for(self, op_entry: dict[str, Any], wait: Any, args: tuple, kwargs: dict) -> Any:
        """Record a blocking `wait` on the async op `op_entry`, and make it."""
        ring = self.ring
        assert ring is not None
        e: dict[str, Any] = {"op": "wait", "handles": [op_entry["handle"]], "state": PENDING}
        site = self.site(3).site
        if site:
            e["site"] = site
        ring.add(e, None)
        ring.block(e)
        try:
            result = self.call_inner(wait, args, kwargs)
        except BaseException:
            ring.finish(e, FAILED)
            ring.finish(op_entry, FAILED)
            self.hold_if_leaving()
            raise
        ring.finish(op_entry, DONE)
        ring.finish(e, DONE)
        return result

    def batch(self, fn: Any, p2p_op_list: list, *rest: Any, **kw: Any) -> Any:
        """`batch_isend_irecv`: each op recorded as an isend/irecv of one batch."""
        if (
            not p2p_op_list
            or not self.enabled
            or getattr(self.local, "depth", 0)
            or not self.started()
        ):
            return fn(p2p_op_list, *rest, **kw)
        ring = self.ring
        assert ring is not None
        dist = self.dist
        batch = f"b{ring.new_handle()}"
        entries = []
        site = self.site().site
        for p in p2p_op_list:
            kind = "send" if getattr(p.op, "__name__", "") in ("isend", "send") else "recv"
            peer = p.peer if p.peer is not None else None
            if peer is None and getattr(p, "group_peer", None) is not None:
                peer = dist.get_global_rank(p.group, p.group_peer)
            call = Call(
                op="isend" if kind == "send" else "irecv",
                group=p.group,
                is_async=True,
                root=peer,
                tensor=p.tensor,
                p2p=kind,
                tag=int(p.tag or 0),
            )
            e, key = self.entry(call)
            e["batch"] = batch
            e["handle"] = ring.new_handle()
            if site:
                e["site"] = site
            ring.add(e, key)
            entries.append(e)
        try:
            works = self.call_inner(fn, (p2p_op_list, *rest), kw)
        except BaseException:
            for e in entries:
                ring.finish(e, FAILED)
            raise
        for work, e in zip(works or [], entries, strict=False):
            with ring.lock:
                ring.works[e["handle"]] = work
            self.works[id(work)] = (work, e)
        return works

    # -- fingerprints -------------------------------------------------------------------------

    def fingerprint(self, e: dict[str, Any], call: Call, kid: int | None = None) -> None:
        """Publish this call's fingerprint; compare with the members that published theirs.

        `--check auto`: a call that repeats a path already seen matched on every member (the
        same fingerprint after the same previous one on this group) is only recorded — a
        peer that needs its fingerprint asks for it (`commlint.guard.answers`); any other call
        publishes its own and the ones before it, asks the members for theirs, waits (up to
        `FP_WAIT`) for them and compares before it enters."""
        group, seq = e["group"], e["seq"]
        _, members = self.group_of(call.group)
        if len(members) < 2:
            return
        stream = None
        if self.adaptive:
            stream = self.stream(e["key"])
            if kid is None:  # not from a template (`commlint.guard.templates`): name it now
                kid = self.fp_record(group, answers.collective_fp(e, call.obj))[3]
            if (stream.prev, kid) in stream.verified:  # `_Stream.trusted`, inline: per call
                stream.prev = kid
                stream.prev_matched = True
                self.fp_trusted += 1
                if self.wanted:  # a peer asked for it before this rank got here
                    self.answer_wanted(e["key"], seq)
                return
        fp = answers.collective_fp(e, call.obj)
        known = self.fp_record(group, fp)
        key = known[3]
        fp["seq"] = seq
        others = [r for r in members if r != self.rank]
        text = _with_seq(known[2], seq)
        if self.adaptive:
            store = self.store()
            answers.publish(self, store, e["key"], seq)  # this call and the ones before it
            answers.request(store, e["key"], seq, others, self.rank)
        else:
            store = self.store()
            store.set(f"fp/{group}/{self.slot(seq)[0]}/{self.rank}", text)
        slot, first_round = self.slot(seq)
        # No waiting in `all`: the member that publishes last sees every fingerprint and
        # compares; the members already inside the collective are ended by their watchdog.
        keys = [f"fp/{group}/{slot}/{r}" for r in others]
        values = self.read_slots(store, keys, first_round, seq, self.adaptive)
        seen = {self.rank: fp}
        for r, v in zip(others, values or [], strict=False):
            theirs = json.loads(v)
            if theirs.get("seq") == seq:
                seen[r] = theirs
        complete = len(seen) == len(members)
        if all(_same(fp, other) for other in seen.values()) and splits_agree(seen, members):
            if stream is not None:
                stream.step(key, complete)
            return
        from commlint.guard.diagnose import mismatch_text, mismatch_trace

        history = self.history(store, group, seq, seen)
        text = mismatch_text(group, members, seq, seen, self.world_size, history)
        self.ring.finish(e, FAILED)  # type: ignore[union-attr]
        self.found(text, mismatch_trace(group, members, seq, seen, self.world_size, history))
        with contextlib.suppress(Exception):
            store.set("fperr", json.dumps({"rank": self.rank, "text": text}))
        raise CommlintGuardError(text)

    def fp_text(self, group: str, fp: dict[str, Any], seq: int) -> tuple[tuple, str]:
        """A fingerprint's key (`_fp_key`) and its JSON text with `seq` added (what
        `json.dumps(fp | {"seq": seq})` gives), formatted once per group, site and content: a
        training step makes the same calls from the same lines, only the sequence number new."""
        known = self.fp_record(group, fp)
        return known[1], _with_seq(known[2], seq)

    def fp_record(self, group: str, fp: dict[str, Any]) -> tuple[dict[str, Any], tuple, str, int]:
        """`fp_text`'s cached record: the fingerprint as formatted, its key, its JSON text
        without the closing brace, and a small integer naming the key (`--check auto` compares
        these: a tuple of tuples is hashed anew on every lookup, an int is not)."""
        where = (group, fp.get("site"))
        known = self.fp_texts.get(where)
        if known is None or known[0] != fp:
            if len(self.fp_texts) >= FP_TEXTS:
                self.fp_texts.clear()
            body = json.dumps(fp)[:-1]
            key = _fp_key(fp)
            ids = self.fp_ids
            kid = ids.get(key)
            if kid is None:
                if len(ids) >= FP_IDS:  # shapes that never repeat: start learning again
                    ids.clear()
                    self.fp_texts.clear()
                    self.streams.clear()
                    self.templates.clear()
                kid = ids[key] = len(ids)
            # the cached copy is the text's own reading: nothing the caller edits later
            known = self.fp_texts[where] = (json.loads(body + "}"), key, body, kid)
        return known

    def stream(self, name: str) -> _Stream:
        """`--check auto`'s memory of a group or channel (made on its first call)."""
        stream = self.streams.get(name)
        if stream is None:
            stream = self.streams[name] = _Stream()
        return stream

    HISTORY = answers.HISTORY  # earlier fingerprints read per rank to find where calls parted

    def history(
        self, store: Any, group: str, seq: int, seen: dict[int, dict[str, Any]]
    ) -> dict[int, list[dict[str, Any]]]:
        """Each rank's fingerprints of the calls just before `seq` on `group` (oldest first,
        as far as the slots still hold them): the aligner finds in them the call one rank
        made that the others did not, which may lie before the call that mismatches. Read
        only on a mismatch, and only when every call is fingerprinted (`--check all|auto`)."""
        out: dict[int, list[dict[str, Any]]] = {}
        if self.every != 1:
            return out
        want = list(range(max(0, seq - min(self.HISTORY, FP_KEEP - 1)), seq))
        for r in seen:
            keys = [f"fp/{group}/{self.slot(n)[0]}/{r}" for n in want]
            try:
                if not keys or not store.check(keys):
                    continue
                fps = [json.loads(v) for v in store.multi_get(keys)]
            except Exception:  # the history only words the diagnosis
                continue
            out[r] = [fp for n, fp in zip(want, fps, strict=True) if fp.get("seq") == n]
        return out

    def slot(self, seq: int) -> tuple[int, bool]:
        """Fingerprints live in FP_KEEP slots per stream, overwritten in turn (no deletes, a
        bounded store); the value carries its sequence number. Until every slot has been
        written once, a read must first check that the key exists (a get would block)."""
        n = seq // self.every
        return n % FP_KEEP, n < FP_KEEP

    @staticmethod
    def read_slots(
        store: Any, keys: list[str], first_round: bool, seq: int, wait: bool
    ) -> list[bytes] | None:
        """The peers' fingerprints in these slots; with `wait`, poll until each carries `seq`
        or `FP_WAIT` has passed (then what is there)."""
        deadline = time.monotonic() + FP_WAIT if wait else 0.0
        pause = 0.0002
        while True:
            values = None
            if not first_round or store.check(keys):
                values = store.multi_get(keys)
                if not wait or all(json.loads(v).get("seq") == seq for v in values):
                    return values
            elif not wait:
                return None
            if time.monotonic() > deadline:
                return values
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def p2p_fingerprint(self, e: dict[str, Any], call: Call, key: str) -> None:
        """Sender and receiver of message k on a channel each publish shape and dtype; the
        one that comes second compares (a receive smaller than the send aborts the receiver
        under gloo, a larger one reads garbage). Nobody waits, except in `--check auto` on a
        path not yet seen matched (see `fingerprint`)."""
        store = self.store()
        seq = e["seq"]
        fp = {k: e[k] for k in ("op", "group", "shape", "dtype", "site") if k in e}
        me, other = ("send", "recv") if call.p2p == "send" else ("recv", "send")
        fp["seq"] = seq
        slot, first_round = self.slot(seq)
        mine = f"fp/{key}/{slot}/{me}"
        stream = fkey = None
        if self.adaptive:
            fkey = _fp_key(fp)
            stream = self.stream(f"{key}:{me}")
            if stream.trusted(fkey):
                stream.step(fkey, True)
                self.fp_trusted += 1
                if self.wanted:  # the peer asked for it before this rank got here
                    self.answer_wanted(key, seq)
                return
            answers.publish(self, store, key, seq)
            answers.request(store, key, seq, [call.root], self.rank)
        else:
            store.set(mine, json.dumps(fp))
        values = self.read_slots(
            store, [f"fp/{key}/{slot}/{other}"], first_round, seq, self.adaptive
        )
        peer_fp = json.loads(values[0]) if values else {}
        if peer_fp.get("seq") != seq:
            if stream is not None and fkey is not None:
                stream.step(fkey, False)
            return
        if peer_fp.get("shape") == fp.get("shape") and peer_fp.get("dtype") == fp.get("dtype"):
            if stream is not None and fkey is not None:
                stream.step(fkey, True)
            return
        from commlint.guard.diagnose import p2p_mismatch_text

        if call.p2p == "send":
            text = p2p_mismatch_text(peer_fp, fp, self.rank, call.root, self.world_size)
        else:
            text = p2p_mismatch_text(e, peer_fp, call.root, self.rank, self.world_size)
        self.ring.finish(e, FAILED)  # type: ignore[union-attr]
        self.found(text, None)
        with contextlib.suppress(Exception):
            store.set("fperr", json.dumps({"rank": self.rank, "text": text}))
        raise CommlintGuardError(text)

    def found(self, text: str, trace: Any) -> None:
        """This rank found a mismatch before a call (raised next): keep the verdict, and save
        the trace it came from (`--save-trace`; without one, this rank's ring)."""
        from commlint.guard.summary import save

        self.verdict_text = text
        if self.options.save_trace:
            save(self.options.save_trace, trace or self.own_trace(), text.splitlines()[:1])

    def own_trace(self) -> Any:
        """This rank's ring as a trace (the others' unknown)."""
        from commlint.guard.diagnose import build_trace

        assert self.ring is not None
        snap = self.ring.snapshot()
        snap.update(status="blocked", groups={n: r for n, r in self.groups.values()})
        return build_trace({self.rank: snap}, self.world_size, self.backend)[0]

    def answer_wanted(self, stream: str, seq: int) -> None:
        """A trusted call a peer asked for before this rank made it (`Guard.wanted`, set by
        the answerer thread under the ring's lock): publish it now (`commlint.guard.answers`).
        Trusted calls publish nothing otherwise: until 2026-11-27 each wrote its fingerprint
        to the store (a TCP send, 65 us of the program's thread per FSDP2 collective on 4 ranks
        sharing 2 cores), and before that a publisher thread did, whose wake-ups cost more
        than the recording."""
        with self.ring.lock:  # type: ignore[union-attr]
            asked = self.wanted.get(stream)
            due = sorted(n for n in asked if n <= seq) if asked else []
            if due:
                asked.difference_update(due)  # type: ignore[union-attr]
                if not asked:
                    del self.wanted[stream]
        for n in due:
            answers.publish(self, self.store(), stream, n)

    # -- end of the program -------------------------------------------------------------------

    def publish_end(self, kind: str, message: str | None = None, site: str | None = None) -> None:
        """Tell the other ranks this one is gone, and what it did: its ring with the end."""
        if self.ended or self.ring is None:
            return
        self.ended = True
        try:
            snap = self.ring.snapshot()
            snap["end"] = {"kind": kind, "message": message, "site": site}
            snap["groups"] = {name: ranks for name, ranks in self.groups.values()}
            store = self.store()
            store.set(f"end/{self.rank}", json.dumps(snap, default=str))
            if self.options.save_trace and kind == "finished" and not self.leaving:
                from commlint.guard.summary import save_at_end

                save_at_end(self, store)
        except Exception:  # the store's host may already be gone at shutdown
            pass
        self.stop_watchdog()

    def stop_watchdog(self) -> None:
        """Let the watchdog finish its tick and end before the process tears torch down: a
        thread still inside a store call during interpreter shutdown can abort the process."""
        self.ended = True
        self.stop_answers()
        w = self.watchdog
        if w is not None and w.is_alive() and w is not threading.current_thread():
            w.wake.set()
            w.join(timeout=2.0)

    def hosts_store(self) -> bool:
        """This process holds the job's TCPStore: rank 0 of an `env://` or `tcp://` launch
        (srun), not under torchrun, whose agent hosts it and outlives the ranks."""
        use_agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        return self.rank == 0 and not use_agent

    def stop_answers(self) -> None:
        """End the answerer thread (blocked in a store `wait`) with a stop request, written
        with this thread's existing client only: a new client to a store whose host has left
        would retry its connection for the whole timeout."""
        a, self.answerer = self.answerer, None
        store = getattr(self.local, "store", None)
        if a is None or not a.is_alive() or a is threading.current_thread() or store is None:
            return
        try:
            answers.stop(store, "all" if self.hosts_store() else self.rank)
        except Exception:  # the store's host may already be gone: the thread ends with it
            return
        a.join(timeout=2.0)


def _ddp_buckets(ddp: Any, probe_bytes: int) -> list[tuple[int, str]]:
    """(elements, dtype) of each gradient bucket of a DDP module, in bucket order."""
    params = [p for p in ddp.parameters() if p.requires_grad]
    nbytes = sum(p.numel() * p.element_size() for p in params)
    if nbytes <= probe_bytes:
        grads = ddp.reducer._get_zeros_like_grad_buckets()
        return [
            (b.buffer().numel(), str(b.buffer().dtype).removeprefix("torch."))
            for b in sorted(grads, key=lambda b: b.index())
        ]
    data = ddp._get_ddp_logging_data()
    sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
    first = params[0] if params else None
    size = first.element_size() if first is not None else 1
    dtype = str(first.dtype).removeprefix("torch.") if first is not None else "uint8"
    return [(int(b) // size, dtype) for b in str(sizes).replace(" ", "").split(",") if b]


def _tracing() -> bool:
    import torch.distributed._functional_collectives as funcol

    return bool(funcol._are_we_tracing())


def _peer_gone(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(
        m in text for m in ("connection closed", "connection reset", "broken pipe")
    )


_DTYPES: dict[Any, str] = {}  # torch.float32 -> "float32", named once per dtype


def _with_seq(body: str, seq: int) -> str:
    """A fingerprint's JSON text without its closing brace, with `"seq": seq` appended."""
    return f'{body}, "seq": {seq}}}' if len(body) > 1 else f'{{"seq": {seq}}}'


def _fp_key(fp: dict[str, Any]) -> tuple:
    """A fingerprint as a hashable key (its sequence number and call chain left out: the
    chain only words a diagnosis)."""
    return tuple(
        (k, tuple(v) if isinstance(v, list) else v)
        for k, v in sorted(fp.items())
        if k not in ("seq", "stack", "via", "label")
    )


def _place(e: dict[str, Any], where: CallSite) -> None:
    """Put a call site on a ring entry."""
    if where.site:
        e["site"] = where.site
    if where.stack:
        e["stack"] = where.stack
    if where.via:
        e["via"] = where.via


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("op", "root", "reduce_op", "shape", "dtype"))
