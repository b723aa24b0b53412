"""The recording process group: whatever backend the script asks for becomes the `commlint`
backend, a Python `ProcessGroup` that records every call (Python `dist.*`, DDP's C++ reducer,
FSDP2, pipelining p2p, coalesced calls) through the rank's `Recorder` and never blocks:
receives are filled from the values other ranks sent in the previous pass (`values.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from commlint.plans.dryrun import fingerprint
from commlint.plans.dryrun.provenance import (
    _copy,
    _copy_parts,
    _even_rows,
    _FakeTensor,
    _is_real,
    _receivable,
    _reduce,
    _row,
    forget,
    from_value,
    sized,
    to_value,
)
from commlint.plans.dryrun.recorder import RecordedWork, Recorder, _Shared, merge_writes
from commlint.plans.dryrun.sites import _REDUCE_NAMES, BACKEND, _frames, user_site
from commlint.plans.dryrun.values import (
    Key,
)


class RecordingProcessGroup(_Shared, dist.ProcessGroup):
    """A backend that records calls, fills outputs from the value table, and never blocks."""

    def __init__(self, recorder: Recorder, rank: int, ranks: list[int], torch_name: str):
        super().__init__(rank, len(ranks))
        self._rec = recorder
        self._me = rank
        self._ranks = list(ranks)
        self._torch_name = torch_name
        self._name = recorder.new_group(torch_name, self._ranks)

    # accessors torch needs of a Python process group
    def getBackendName(self) -> str:
        return BACKEND

    @property
    def group_name(self) -> str:
        return self._torch_name

    def getGroupName(self) -> str:
        return self._torch_name

    def setGroupName(self, name: str) -> None:
        self._torch_name = name

    def _set_group_name(self, name: str) -> None:
        self._torch_name = name

    @property
    def supports_coalescing(self) -> bool:
        return False

    # helpers
    def _next(self, op: str) -> Key:
        # The op is part of the key: a backend never pairs two different collectives (both
        # sides hang), so their values never meet either — and a mismatched program's passes
        # settle instead of feeding an all_reduce's tuple to a broadcast.
        n = self._rec.seq.get(self._name, 0)
        self._rec.seq[self._name] = n + 1
        return ("c", self._name, n, op)

    def _work(self, handle: str | None, result: list[torch.Tensor]) -> RecordedWork:
        return RecordedWork(self._rec, handle, result)

    def _coll(
        self,
        op: str,
        tensors: list[torch.Tensor],
        contribution: Any,
        result: list[torch.Tensor],
        **kw: Any,
    ) -> tuple[RecordedWork, dict[int, Any] | None]:
        key = self._next(op)
        handle = self._rec.record(op, self._name, tensors, frames=_frames(3), **kw)
        work = self._work(handle, result)
        for t in result:
            fingerprint.written(t)  # what it held before is gone
        if self._rec.from_cpp:
            # Gradient buckets and parameter broadcasts of DDP/functional collectives carry
            # model data: with real tensors they are exchanged (programs check gradient sync,
            # comm hooks read them) under a key whose signature is who contributed, not what
            # — a rank runs again once its peers' buckets exist, never because their values
            # moved (unseeded data would make the passes churn). Fake ones carry nothing: their
            # outputs are filled as if every rank had sent what this one sent.
            if not any(_is_real(t) for t in result) or contribution is None:
                return work, {}
            model_key = ("m", *key[1:])
            self._rec.contribute(model_key, contribution)
            return work, self._rec.receive(model_key, self._ranks)
        self._rec.contribute(key, contribution)
        for t in result:
            forget(t)  # a fake buffer knows only what this call delivers into it
        wants = any(_receivable(t) for t in result)
        got = self._rec.receive(key, self._ranks) if wants else None
        return work, got

    def _part(self, got: dict[int, Any] | None, member: int, own: Any, buffer: Any) -> Any:
        """What `member` contributed; a missing one (not known yet) is the rank's own for a
        real buffer (until the next pass brings it), None — unknown — for a fake one."""
        if member == self._me:
            return own
        v = self._from(got, member, None)
        if v is None and not isinstance(buffer, _FakeTensor):
            return own
        return v

    def _from(self, got: dict[int, Any] | None, member: int, default: Any) -> Any:
        if got is None:
            return default
        v = got.get(self._ranks[member])
        return default if v is None else v

    @staticmethod
    def _reduce_name(opts: Any) -> str:
        # `opts.reduceOp` is a ReduceOp object, which hashes like its RedOpType but is never
        # equal to it as a dict key: look the type up through `.op`.
        op = getattr(opts, "reduceOp", None)
        return _REDUCE_NAMES.get(getattr(op, "op", op), "sum")

    @staticmethod
    def _factor(opts: Any) -> Any:
        """premul_sum's factor (a number or a one-element tensor); None for other ops."""
        op = getattr(opts, "reduceOp", None)
        if getattr(op, "op", None) != dist.ReduceOp.RedOpType.PREMUL_SUM:
            return None  # torch raises when any other op is asked for its factor
        return op.factor

    # collectives
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> RecordedWork:
        red = self._reduce_name(opts)
        vals = tuple(to_value(t) for t in tensors)
        work, got = self._coll("all_reduce", tensors, vals, tensors, reduce_op=red)
        if got is not None:
            for i, t in enumerate(tensors):
                if vals[i] is None:
                    continue
                parts = []
                local = from_value(vals[i])
                fake = isinstance(t, _FakeTensor)
                for m in range(len(self._ranks)):
                    v = vals if m == self._me else self._from(got, m, None)
                    if v is None or v[i] is None:
                        if fake:  # a peer's value is not known: neither is the sum
                            break
                        v = vals  # real tensors: the rank's own until the peer's is known
                    part = from_value(v[i])
                    # A peer's buffer of another shape is the program's bug (the checker
                    # reports CL204 from the recorded shapes), not a reason for the recorder
                    # to raise: reduce what lines up, keep the local value otherwise.
                    if isinstance(part, torch.Tensor) and isinstance(local, torch.Tensor):
                        part = part.reshape(local.shape) if part.numel() == local.numel() else local
                    parts.append(part)
                if len(parts) == len(self._ranks):
                    _copy(t, _reduce(parts, red, self._factor(opts)))
        self._rec.filled_alike(len(self._ranks), tensors)
        return work

    allreduce_coalesced = allreduce

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> RecordedWork:
        root = opts.rootRank
        mine = root == self._me
        vals = tuple(to_value(t) for t in tensors) if mine else None
        work, got = self._coll(
            "broadcast", tensors, vals, [] if mine else tensors, root=self._ranks[root]
        )
        src = self._from(got, root, None)
        if src is not None:
            for t, v in zip(tensors, src, strict=False):
                _copy(t, from_value(v) if v is not None else None)
        self._rec.filled_alike(len(self._ranks), tensors)
        return work

    def allgather(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        own = to_value(inputs[0])
        work, got = self._coll("all_gather", inputs, own, outputs[0])
        if got is not None and own is not None:
            for m, out in enumerate(outputs[0]):
                v = self._part(got, m, own, out)
                if v is not None:
                    _copy(out, from_value(v))
        self._rec.filled_alike(len(self._ranks), outputs[0])
        return work

    def _allgather_base(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> RecordedWork:
        own = to_value(input)
        work, got = self._coll("all_gather", [input], own, [output])
        if got is not None and own is not None:
            parts = [self._part(got, m, own, output) for m in range(len(self._ranks))]
            _copy_parts(output, parts, output.chunk(len(self._ranks)))
        self._rec.filled_alike(len(self._ranks), (output,))
        return work

    def _each_pair(self, op: Any, outputs: list, inputs: list, opts: Any) -> RecordedWork:
        """A coalesced call: the single-tensor op per (output, input) pair, in order."""
        work = None
        for o, i in zip(outputs, inputs, strict=False):
            work = op(o, i, opts)
        return work or self._work(None, [])

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        return self._each_pair(self._allgather_base, outputs, inputs, opts)

    def gather(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        root = opts.rootRank
        own = to_value(inputs[0])
        result = outputs[0] if root == self._me and outputs else []
        work, got = self._coll("gather", inputs, own, result, root=self._ranks[root])
        if got is not None and own is not None:
            for m, out in enumerate(result):
                v = self._part(got, m, own, out)
                if v is not None:
                    _copy(out, from_value(v))
        return work

    def scatter(
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None
    ) -> RecordedWork:
        root = opts.rootRank
        mine = root == self._me
        vals = tuple(to_value(t) for t in inputs[0]) if mine and inputs else None
        work, got = self._coll(
            "scatter", outputs, vals, [] if mine else outputs, root=self._ranks[root]
        )
        if mine and inputs:
            _copy(outputs[0], inputs[0][self._me])
        else:
            src = self._from(got, root, None)
            if src is not None and src[self._me] is not None:
                _copy(outputs[0], from_value(src[self._me]))
        return work

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> RecordedWork:
        red = self._reduce_name(opts)
        root = opts.rootRank
        own = to_value(tensors[0])
        result = tensors if root == self._me else []
        work, got = self._coll(
            "reduce", tensors, own, result, root=self._ranks[root], reduce_op=red
        )
        if got is not None and own is not None:
            parts = [self._part(got, m, own, tensors[0]) for m in range(len(self._ranks))]
            if all(v is not None for v in parts):
                parts = [from_value(v) for v in parts]
                _copy(tensors[0], _reduce(parts, red, self._factor(opts)))
        return work

    def _reduce_scatter_base(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> RecordedWork:
        red = self._reduce_name(opts)
        own = to_value(input)
        work, got = self._coll("reduce_scatter", [input], own, [output], reduce_op=red)
        if got is not None and own is not None:
            n = len(self._ranks)
            parts = [self._part(got, m, own, output) for m in range(n)]
            if all(v is not None for v in parts):
                parts = [from_value(v).chunk(n)[self._me] for v in parts]
                _copy(output, _reduce(parts, red, self._factor(opts)))
        return work

    def reduce_scatter(
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None
    ) -> RecordedWork:
        red = self._reduce_name(opts)
        own = tuple(to_value(t) for t in inputs[0])
        work, got = self._coll("reduce_scatter", inputs[0][:1], own, outputs, reduce_op=red)
        if got is not None and own[self._me] is not None:
            parts = []
            fake = isinstance(outputs[0], _FakeTensor)
            for m in range(len(self._ranks)):
                v = self._part(got, m, own, outputs[0])
                if v is not None and v[self._me] is None and not fake:
                    v = own
                if v is None or v[self._me] is None:
                    break
                parts.append(from_value(v[self._me]))
            if len(parts) == len(self._ranks):
                _copy(outputs[0], _reduce(parts, red, self._factor(opts)))
        return work

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        return self._each_pair(self._reduce_scatter_base, outputs, inputs, opts)

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> RecordedWork:
        n = len(self._ranks)
        extra: dict[str, Any] | None = None
        in_rows = list(input_split_sizes) or _even_rows(input, n)
        out_rows = list(output_split_sizes) or _even_rows(output, n)
        row = _row(input)
        if row is not None and all(type(r) is int for r in (*in_rows, *out_rows)):
            extra = {
                "in_splits": [r * row for r in in_rows],
                "out_splits": [r * row for r in out_rows],
            }
        # else: a data-dependent size (tokens picked by `nonzero`): the splits are not known
        own = to_value(input)
        rows = tuple(in_rows) if extra else ()
        work, got = self._coll("all_to_all", [input], (own, rows), [output], extra=extra)
        if got is not None and own is not None:
            pieces = []
            for m in range(n):
                v, sent = (own, rows) if m == self._me else self._from(got, m, (None, ()))
                known = v is not None and len(sent) == n
                pieces.append(from_value(v).split(list(sent))[self._me] if known else None)
            _copy_parts(output, pieces, output.split(out_rows))
        return work

    def alltoall(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        own = tuple(to_value(t) for t in inputs)
        extra = (
            {
                "in_splits": [t.numel() for t in inputs],
                "out_splits": [t.numel() for t in outputs],
            }
            if all(sized(t) for t in (*inputs, *outputs))
            else None
        )
        work, got = self._coll("all_to_all", inputs[:1], own, outputs, extra=extra)
        if got is not None:
            for m, out in enumerate(outputs):
                v = own if m == self._me else self._from(got, m, None)
                if v is not None and v[self._me] is not None:
                    _copy(out, from_value(v[self._me]))
        return work

    # torch 2.13 names for the single-tensor collectives
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def barrier(self, opts: Any = None) -> RecordedWork:
        key = self._next("barrier")
        handle = self._rec.record("barrier", self._name, [], frames=_frames(2))
        self._side_effects(key)
        return self._work(handle, [])

    def _side_effects(self, key: Key) -> None:
        """A barrier orders side effects: what a member wrote before it is there for every
        member after it ("main process first": rank 0 writes a cache, the others wait, then
        all read it). Each rank runs alone, so the files written before the barrier are its
        contribution, and a member runs again once another member's files appear."""
        if self._rec.from_cpp:
            return
        mine = self._rec.take_written()
        self._rec.contribute(key, mine)
        by_path: dict[str, dict[int, bytes]] = {}
        received = self._rec.receive(key, self._ranks)
        for r, contribution in [(self._me, mine), *received.items()]:
            for path, content in getattr(contribution, "files", ()):
                if content is not None:
                    by_path.setdefault(path, {})[r] = content
        rec = self._rec
        for contribution in received.values():
            for path in getattr(contribution, "removed", ()):
                if path not in by_path:  # removed by one member, written by none
                    rec.private.pop(path, None)
                    rec.delivered.pop(path, None)
                    rec.dirs.discard(path)
                    rec.gone.add(path)
            for path in getattr(contribution, "made", ()):
                rec.dirs.add(path)
                rec.gone.discard(path)
        for path, versions in by_path.items():
            if set(versions) == {self._me}:
                continue  # only this rank wrote it: its own copy is what it sees
            rec.delivered[path] = merge_writes([versions[r] for r in sorted(versions)])
            rec.private.pop(path, None)  # the next write starts from what all wrote
            rec.gone.discard(path)

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        """gloo's monitored barrier: every member meets the group's first rank (send to it,
        then wait for its answer), which raises naming the ranks that did not arrive in time
        (all of them with `wait_all_ranks`) — a barrier on the group that fails instead of
        hanging. It is recorded as a barrier: a member that never arrives strands the others
        (CL2xx), as it makes them raise in a real run."""
        key = self._next("barrier")
        self._rec.emit(
            {"op": "barrier", "group": self._name, "label": "monitored_barrier"}, _frames(2)
        )
        self._rec.from_cpp = False
        self._side_effects(key)

    # point to point
    def _channel(self, src: int, dst: int, tag: int) -> Key:
        chan = (self._name, src, dst, tag)
        n = self._rec.p2p_seq.get(chan, 0)
        self._rec.p2p_seq[chan] = n + 1
        return ("p", *chan, n)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> RecordedWork:
        peer = self._ranks[dst]
        handle = self._rec.record(
            "send", self._name, tensors, peer=peer, tag=tag, frames=_frames(2)
        )
        key = self._channel(self._rec.rank, peer, tag)
        self._rec.contribute(key, to_value(tensors[0]))
        # That this message exists, whatever its value (a fake tensor has none): a receive
        # from any source pairs with it.
        self._rec.contribute(("s", *key[1:]), True)
        return self._work(handle, tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> RecordedWork:
        return self._recv_from(tensors, src, tag, None, _frames(2))

    def _recv_from(
        self, tensors: list[torch.Tensor], src: int, tag: int, extra: Any, frames: list[Any]
    ) -> RecordedWork:
        peer = self._ranks[src]
        handle = self._rec.record(
            "recv", self._name, tensors, peer=peer, tag=tag, extra=extra, frames=frames
        )
        key = self._channel(peer, self._rec.rank, tag)
        forget(tensors[0])  # a fake buffer knows only what arrives in it
        if _receivable(tensors[0]):
            v = self._rec.receive(key, [peer]).get(peer)
            if v is not None:
                _copy(tensors[0], from_value(v))
        work = self._work(handle, tensors)
        work._source = src
        return work

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> RecordedWork:
        """`recv(src=None)`: gloo pairs it with a pending send to this rank with this tag —
        the first one announced, or the first to arrive. The trace names one peer per receive,
        so the receive is recorded from the sender it pairs with: the member whose next
        message to this rank (with this tag) exists, known from the previous pass. When
        several have one, the real pairing depends on timing and the lowest rank is followed;
        when none has, the receive blocks forever and is recorded from the lowest other
        member, which never sends it (the checker reports the hang). A note in the trace's
        `meta.assumes` says which."""
        me = self._rec.rank
        senders, others = [], []
        for m, peer in enumerate(self._ranks):
            if peer == me:
                continue
            others.append(m)
            n = self._rec.p2p_seq.get((self._name, peer, me, tag), 0)
            if peer in self._rec.receive(("s", self._name, peer, me, tag, n)):
                senders.append(m)
        frames = _frames(2)
        if len(senders) != 1 and others:
            site, _ = user_site(frames)
            where = f"recv from any source at {site or 'a torch call'}"
            if senders:
                choices = ", ".join(str(self._ranks[m]) for m in senders)
                note = (
                    f"{where} could pair with ranks {choices} (whichever sends first); the "
                    f"dry-run followed rank {self._ranks[senders[0]]}"
                )
            else:
                note = (
                    f"{where}: no rank sends rank {me} a message it could pair with (tag "
                    f"{tag}); recorded as a receive from rank {self._ranks[others[0]]}"
                )
            self._rec.send(("assume", note))
        src = senders[0] if senders else others[0] if others else self._me
        return self._recv_from(tensors, src, tag, {"label": "recv from any source"}, frames)


def make_backend(recorder: Recorder) -> Callable:
    def create(opts: Any, backend_opts: Any = None) -> RecordingProcessGroup:
        ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
        return RecordingProcessGroup(recorder, opts.group_rank, ranks, str(opts.group_id))

    return create
