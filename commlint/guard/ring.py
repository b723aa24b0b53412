"""What one rank of a guarded job did: a bounded ring of recent communication calls.

Entries are plain dicts in the trace format's vocabulary (`commlint.trace.Action` fields) plus
the bookkeeping the stall check needs: `key` (the stream the call belongs to: one per group
for collectives, one per (group, src, dst, tag) channel for p2p, the way the checker matches
them), `seq` (its index in that stream on this rank) and `state` (`pending`, `done`, `failed`).
The ring is written by the rank's own threads and read by its watchdog: every change happens
under one lock, and a snapshot is a copy taken under it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

PENDING, DONE, FAILED = "pending", "done", "failed"


class Ring:
    """The last `size` communication calls of this rank, and what it is blocked in now."""

    def __init__(self, rank: int, size: int = 512) -> None:
        self.rank = rank
        self.entries: deque[dict[str, Any]] = deque(maxlen=size)
        self.lock = threading.Lock()
        self.next_seq: dict[str, int] = {}
        # Work objects of async ops not yet known complete, by handle; bounded by the ring.
        self.works: dict[str, Any] = {}
        self.handles = 0
        # The entry this rank's main thread is blocked in, and since when (monotonic).
        self.inflight: dict[str, Any] | None = None
        self.inflight_since = 0.0
        self.progress = 0
        # The main thread is inside autograd's backward() since (monotonic), and which one.
        self.backward_since: float | None = None
        self.backward_id = 0
        self.backward_site: str | None = None

    def add(self, entry: dict[str, Any], key: str | None) -> dict[str, Any]:
        with self.lock:
            if key is not None:
                seq = self.next_seq.get(key, 0)
                self.next_seq[key] = seq + 1
                entry["key"], entry["seq"] = key, seq
            if len(self.entries) == self.entries.maxlen:
                old = self.entries[0]
                if old.get("handle"):
                    self.works.pop(old["handle"], None)
            self.entries.append(entry)
            self.progress += 1
        return entry

    def new_handle(self) -> str:
        with self.lock:
            self.handles += 1
            return f"r{self.rank}h{self.handles}"

    def block(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.inflight = entry
            self.inflight_since = time.monotonic()

    def finish(self, entry: dict[str, Any], state: str = DONE) -> None:
        with self.lock:
            entry["state"] = state
            if self.inflight is entry:
                self.inflight = None
            handle = entry.get("handle")
            if handle and state != PENDING:
                self.works.pop(handle, None)
            self.progress += 1

    def stalled_for(self) -> float:
        """Seconds the main thread has been blocked in its current call (0 if none)."""
        with self.lock:
            if self.inflight is not None:
                return time.monotonic() - self.inflight_since
            if self.backward_since is not None and self.backward_handles():
                return time.monotonic() - self.backward_since
            return 0.0

    def backward_handles(self) -> list[str]:
        """Async ops issued during the running `backward()` (DDP's buckets) that are not known
        complete: DDP waits for them in C++ at the end of backward. Call under the lock."""
        return [
            e["handle"]
            for e in self.entries
            if e.get("bwd") == self.backward_id and e.get("handle") and e["state"] == PENDING
        ]

    def enter_backward(self, site: str | None) -> None:
        with self.lock:
            self.backward_id += 1
            self.backward_since = time.monotonic()
            self.backward_site = site

    def leave_backward(self) -> None:
        with self.lock:
            self.backward_since = None

    def snapshot(self) -> dict[str, Any]:
        """A copy of the ring as JSON-ready data, async ops' completion refreshed."""
        with self.lock:
            works = dict(self.works)
        done = set()
        for handle, work in works.items():
            try:
                if work.is_completed():
                    done.add(handle)
            except Exception:  # a work object of another kind: its state stays unknown
                pass
        with self.lock:
            entries = []
            for e in self.entries:
                e2 = dict(e)
                if e2.get("handle") in done and e2.get("state") == PENDING:
                    e2["state"] = DONE
                entries.append(e2)
            return {
                "rank": self.rank,
                "entries": entries,
                "next_seq": dict(self.next_seq),
                "blocked": self.inflight is not None,
            }
