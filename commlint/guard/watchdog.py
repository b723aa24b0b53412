"""The stall watchdog: one thread per rank, talking to the others through the store only.

Protocol (keys under the guard's prefix; R is the current round, `store.add("round", 0)`):
- `hb/<rank>`: a counter bumped every tick, so a rank that died is told from a slow one;
- a rank blocked in one call for more than the guard timeout sets `want/R`;
- every rank that sees `want/R` publishes `state/R/<rank>`: its ring, what it is blocked in
  (or that it is running), its groups;
- the lowest rank that published claims the round (`coord/R`), waits for every rank's state
  (or its exit record `end/<rank>`, or its heartbeat to stop), builds the trace and runs the
  checker. A proven hang → `verdict/R`: the coordinator prints the diagnosis, every rank
  exits non-zero (`os._exit`: tearing down a wedged group can hang). No proof (a rank still
  running may yet answer) → `round` moves on and the stalled ranks ask again later.
- `fperr`: a fingerprint mismatch found by a member before it entered the collective; the
  members already inside it cannot be raised in, so their watchdogs end them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from commlint.guard.ring import Ring


class Watchdog(threading.Thread):
    def __init__(self, guard: Any, ring: Ring) -> None:
        super().__init__(name="commlint-guard-watchdog", daemon=True)
        self.guard = guard
        self.ring = ring
        self.timeout = guard.options.timeout
        self.tick = min(0.5, max(0.05, self.timeout / 10))
        self.beats = 0
        self.requested_at = -1e9
        self.published: int | None = None
        self.want_seen: dict[int, float] = {}
        self.wake = threading.Event()  # set to end the wait between beats at once

    def run(self) -> None:
        try:
            import commlint.graph.check  # noqa: F401  (ready before the first stall)
            from commlint.guard.liveness import identity

            store = self.guard.new_store()
            store.set(f"info/{self.ring.rank}", json.dumps(identity()))
            while not self.guard.ended:
                self.wake.wait(self.tick)
                if self.guard.ended:
                    break
                self.step(store)
            del store  # close the client here, not during interpreter shutdown
        except Exception as exc:  # the guard must never take the job down by itself
            if not self.guard.ended:
                from commlint.guard.frames import _brief

                self.guard.degrade(f"watchdog stopped: {_brief(exc)}")

    def step(self, store: Any) -> None:
        rank = self.ring.rank
        self.beats += 1
        store.set(f"hb/{rank}", str(self.beats))
        if store.check(["fperr"]) and self.ring.stalled_for() > self.tick:
            err = json.loads(store.get("fperr"))
            if err.get("rank") != rank:
                self.leave(
                    f"commlint guard: rank {rank} stops: rank {err.get('rank')} found that "
                    f"this rank's call does not match its own:\n{err.get('text')}"
                )
        rnd = int(store.add("round", 0))
        if store.check([f"verdict/{rnd}"]):
            v = json.loads(store.get(f"verdict/{rnd}"))
            self.leave(
                f"commlint guard: rank {rank} stops: rank {v['coordinator']} diagnosed a hang "
                f"({', '.join(v['codes'])}); its report has the details."
            )
        stalled = self.ring.stalled_for()
        now = time.monotonic()
        if stalled > self.timeout and now - self.requested_at > self.timeout / 2:
            self.requested_at = now
            store.set(f"want/{rnd}", str(rank))
        if not store.check([f"want/{rnd}"]):
            return
        if self.published != rnd:
            self.published = rnd
            self.want_seen[rnd] = now
            store.set(f"state/{rnd}/{rank}", json.dumps(self.state(stalled), default=str))
            return
        if now - self.want_seen.get(rnd, now) < self.tick:
            return  # give every rank one tick to publish
        world = self.guard.world_size
        lower = [f"state/{rnd}/{r}" for r in range(rank)]
        if any(store.check([k]) for k in lower):
            return  # a lower rank published: it coordinates
        if int(store.add(f"coord/{rnd}", 1)) == 1:
            self.coordinate(store, rnd, world)

    def state(self, stalled: float) -> dict[str, Any]:
        snap = self.ring.snapshot()
        ring = self.ring
        with ring.lock:
            inflight = dict(ring.inflight) if ring.inflight else None
            if inflight is None and ring.backward_since is not None:
                done = {e.get("handle") for e in snap["entries"] if e.get("state") == "done"}
                handles = [h for h in ring.backward_handles() if h not in done]
                if handles:
                    # inside backward(), DDP waits (in C++) for its bucket all-reduces
                    inflight = {"op": "wait", "handles": handles, "state": "pending"}
                    if ring.backward_site:
                        inflight["site"] = ring.backward_site
                    inflight["label"] = "backward() waits for its gradient all-reduces"
                    snap["entries"].append(inflight)
        snap["status"] = "blocked" if inflight else "running"
        if not inflight:
            from commlint.guard.liveness import main_thread_stack

            snap["where"] = main_thread_stack()
        snap["inflight"] = inflight
        snap["blocked_for"] = stalled
        snap["groups"] = {name: ranks for name, ranks in self.guard.groups.values()}
        return snap

    def coordinate(self, store: Any, rnd: int, world: int) -> None:
        from commlint.guard.diagnose import diagnose, format_report, stall_report

        deadline = time.monotonic() + max(4 * self.tick, min(self.timeout / 2, 5.0))
        states: dict[int, dict[str, Any]] = {}
        beats: dict[int, str] = {}
        while True:
            for r in range(world):
                if r in states:
                    continue
                if store.check([f"state/{rnd}/{r}"]):
                    states[r] = json.loads(store.get(f"state/{rnd}/{r}"))
                elif store.check([f"end/{r}"]):
                    s = json.loads(store.get(f"end/{r}"))
                    s["status"] = "ended"
                    states[r] = s
            if len(states) == world or time.monotonic() > deadline:
                break
            for r in range(world):
                if r not in states and store.check([f"hb/{r}"]):
                    beats.setdefault(r, store.get(f"hb/{r}").decode())
            time.sleep(self.tick / 2)
        for r in range(world):
            if r in states:
                continue
            alive = store.check([f"hb/{r}"]) and store.get(f"hb/{r}").decode() != beats.get(r)
            if alive:
                states[r] = {"status": "running"}
                continue
            from commlint.guard.liveness import silent_rank

            info = json.loads(store.get(f"info/{r}")) if store.check([f"info/{r}"]) else None
            status, why = silent_rank(info)
            states[r] = {"status": status, "why": why}
        d = diagnose(states, world, self.guard.backend)
        waited = max((s.get("blocked_for") or 0.0) for s in states.values())
        after = waited + time.monotonic() - self.want_seen.get(rnd, time.monotonic())
        if not d.hang:
            if not self.report_stall(store, states, after):
                store.add("round", 1)
                return
            text = stall_report(states, self.timeout, after, None, killed=True)
            codes = ["stall"]
        else:
            text = format_report(d, states, self.timeout, after)
            codes = sorted({f.code for f in d.hang})
        self.guard.leaving = True
        self.guard.verdict_text = text
        self.save(d, text)  # before the verdict: the others' exits make the launcher end this one
        store.set(f"verdict/{rnd}", json.dumps({"coordinator": self.ring.rank, "codes": codes}))
        print(text, file=sys.stderr, flush=True)
        time.sleep(2 * self.tick)  # the others leave first, on the verdict, not on our exit
        self.leave("")

    def report_stall(self, store: Any, states: dict[int, dict[str, Any]], after: float) -> bool:
        """No hang proven, but a rank has been blocked past the timeout while others are
        running, stopped or silent: say what every rank is doing, at a growing interval.
        True when the job is to be ended for it (`--kill-stalled`).

        The schedule (`stall`: when the last report was printed, the gap to the next) lives
        in the store, not in this rank: whichever rank coordinates a round — the lowest that
        published its state in time, which under load is not always the same — keeps the
        one schedule (a rank-local one printed 2, 4, 8, then 2 s again when rank 1 stood in)."""
        if not any(s.get("status") == "blocked" for s in states.values()):
            return False
        last = json.loads(store.get("stall")) if store.check(["stall"]) else None
        now = time.time()
        if last is not None and now < last["at"] + last["gap"]:
            return False
        if self.guard.options.kill_stalled:
            return True
        gap = self.timeout if last is None else 2 * last["gap"]
        store.set("stall", json.dumps({"at": now, "gap": gap}))
        from commlint.guard.diagnose import stall_report

        text = stall_report(states, self.timeout, after, gap, killed=False)
        print(text, file=sys.stderr, flush=True)
        return False

    def save(self, d: Any, text: str) -> None:
        from commlint.guard.summary import save

        lines = [f"{f.code}: {f.message}" for f in d.hang] or text.splitlines()[:1]
        save(self.guard.options.save_trace, d.trace, lines)

    def leave(self, text: str) -> None:
        self.guard.leaving = True
        self.guard.ended = True
        if text:
            print(text, file=sys.stderr, flush=True)
        try:
            sys.stdout.flush()
        finally:
            os._exit(1)
