"""`--check auto`'s fingerprints on request: a trusted call publishes nothing.

A call that repeats a path already seen matched on every member is *trusted*: it is only
recorded in the rank's ring. Its fingerprint is needed by one reader only — a member whose
own call at the same sequence number is *not* trusted (it left the path, or the path is new)
and compares before it enters. That member asks (`request`): it appends `{stream, seq,
ranks, from}` to the job's request log (`fpq/<k>`, `k` from `store.add("fpq", 1)`). Each
rank's `Answerer` thread sleeps inside `store.wait` on the log's next key — a socket read,
no polling, no wake-ups, no GIL while it waits — and on a request for a stream it takes part
in publishes its fingerprint of that call and the `HISTORY` calls before it, straight from
its ring, into the slots the asker reads (`fp/<group>/<slot>/<rank>`, or for a p2p channel
`fp/<channel>/<slot>/<send|recv>`). A rank that has not reached the call yet notes the
request (`Guard.wanted`); its main thread publishes when it makes the call (the note is set
and the ring searched under the ring's lock, and the main thread reads the note after it
added the call to the ring, so one of the two always sees the other).

Why this keeps every guarantee of publishing on every call: a trusted call's fingerprint was
read only by a peer's untrusted call of the same sequence number (and, on a mismatch, the
calls just before it); that peer now gets the same text, from the same fields, within the
same wait (`FP_WAIT`) — whether this rank is already blocked inside the call (the answerer
thread replies: the main thread is in C++ and does not hold the GIL), ahead of it (async
ops: the ring holds the last 512 calls), or not there yet (its main thread replies on
arrival). Before 2026-11-27 every trusted call wrote its fingerprint to the store: a TCP send
per call, about 65 us of the program's thread per FSDP2 collective on 4 ranks sharing 2 cores.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

# what a collective's fingerprint carries: what must agree, and where it was called from
FP_FIELDS = ("op", "root", "reduce_op", "shape", "dtype", "in_splits", "out_splits")
FP_FIELDS += ("site", "stack", "via", "label")
P2P_FIELDS = ("op", "group", "shape", "dtype", "site")
HISTORY = 8  # earlier fingerprints published with an answer (the aligner's context)
# a store `wait` that times out prints C++ warnings; the answerer waits as long as a job runs
_FOREVER = timedelta(days=7)
_SEND = ("send", "isend")
# requests kept in the store: each asker deletes the one this many before its own (a router
# whose counts change every step asks every step); an answerer this far behind skips ahead
REQUESTS_KEPT = 4096


def collective_fp(e: dict[str, Any], obj: bool = False) -> dict[str, Any]:
    """A collective's fingerprint, from its ring entry (without the sequence number): an
    all_to_all's shape is left out (its members' sizes differ by design; its counts are in),
    and an object collective's (`obj`: its sizes differ by design)."""
    fp = {k: e[k] for k in FP_FIELDS if k in e}
    if obj or e.get("op") == "all_to_all":
        fp.pop("shape", None)
    return fp


def p2p_fp(e: dict[str, Any]) -> dict[str, Any]:
    """A send's or receive's fingerprint, from its ring entry (with its sequence number)."""
    fp = {k: e[k] for k in P2P_FIELDS if k in e}
    fp["seq"] = e["seq"]
    return fp


def slot_name(e: dict[str, Any], rank: int, slot: int) -> str:
    """The store key this rank publishes the fingerprint of ring entry `e` under."""
    stream = e["key"]
    if stream.startswith("p2p:"):
        return f"fp/{stream}/{slot}/{'send' if e['op'] in _SEND else 'recv'}"
    return f"fp/{e['group']}/{slot}/{rank}"


def entry_text(e: dict[str, Any]) -> str | None:
    """The JSON text a peer reads for ring entry `e` (None: a call that is not compared — an
    object send or receive, which carries no shape)."""
    if e["key"].startswith("p2p:"):
        return json.dumps(p2p_fp(e)) if "shape" in e else None
    return json.dumps(collective_fp(e) | {"seq": e["seq"]})


def publish(guard: Any, store: Any, stream: str, seq: int) -> None:
    """Publish this rank's fingerprints of call `seq` of `stream` and the `HISTORY` calls before
    it (for p2p: that call only), from the ring, in one store write; the earlier calls first,
    so a reader that sees call `seq` sees its history too."""
    ring = guard.ring
    low = seq if stream.startswith("p2p:") else seq - HISTORY
    with ring.lock:
        found = [dict(e) for e in ring.entries if e.get("key") == stream and low <= e["seq"] <= seq]
    keys, texts = [], []
    for e in sorted(found, key=lambda e: e["seq"]):
        text = entry_text(e)
        if text is not None:
            keys.append(slot_name(e, guard.rank, guard.slot(e["seq"])[0]))
            texts.append(text)
    if keys:
        store.multi_set(keys, texts)


def request(store: Any, stream: str, seq: int, ranks: list[int], asker: int) -> None:
    """Ask `ranks` for their fingerprints of call `seq` of `stream` (see the module text)."""
    k = int(store.add("fpq", 1))
    text = json.dumps({"stream": stream, "seq": seq, "ranks": ranks, "from": asker})
    store.set(f"fpq/{k}", text)
    if k > REQUESTS_KEPT:
        store.delete_key(f"fpq/{k - REQUESTS_KEPT}")


def stop(store: Any, rank: int | str) -> None:
    """End this rank's answerer: a request only it acts on (the others skip it); `"all"`:
    every rank's (the store's host is leaving: a client blocked in a `wait` on a store that
    went away prints a C++ warning with its stack, and there is nothing left to answer)."""
    k = int(store.add("fpq", 1))
    store.set(f"fpq/{k}", json.dumps({"stop": rank}))


def note_or_publish(guard: Any, store: Any, stream: str, seq: int) -> None:
    """An answer: publish the call when the ring has it, else note that the main thread must
    publish it when it makes the call."""
    ring = guard.ring
    with ring.lock:
        reached = ring.next_seq.get(stream, 0) > seq
        if not reached:
            guard.wanted.setdefault(stream, set()).add(seq)
    if reached:
        publish(guard, store, stream, seq)


class Answerer(threading.Thread):
    """Replies to the fingerprint requests of this rank's peers (see the module text)."""

    def __init__(self, guard: Any) -> None:
        super().__init__(name="commlint-guard-answers", daemon=True)
        self.guard = guard

    def run(self) -> None:
        guard = self.guard
        rank = guard.rank
        try:
            store = guard.new_store()
            k = 1
            while not guard.ended:
                if k % max(1, REQUESTS_KEPT // 64) == 0:  # now and then: far behind? skip on
                    newest = int(store.add("fpq", 0))
                    if newest - k > REQUESTS_KEPT // 2:
                        k = newest  # those askers gave up long ago
                # few round trips to a request: its asker waits for the answer (up to FP_WAIT)
                store.wait([f"fpq/{k}"], _FOREVER)
                raw = store.get(f"fpq/{k}") if store.check([f"fpq/{k}"]) else b""
                k += 1
                if not raw:  # deleted since it was written (this answerer fell far behind)
                    continue
                req = json.loads(raw)
                if req.get("stop") in (rank, "all"):
                    break
                if rank in req.get("ranks", ()) and req.get("from") != rank:
                    note_or_publish(guard, store, req["stream"], int(req["seq"]))
            del store  # close the client here, not during interpreter shutdown
        except Exception as exc:  # the guard must never take the job down by itself
            if not guard.ended:
                from commlint.guard.frames import _brief

                guard.degrade(f"fingerprint answers stopped: {_brief(exc)}")
