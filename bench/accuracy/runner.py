"""Ground truth: run benchmark programs for real, with gloo on CPU, many per launch.

One launch = W worker processes (one per rank) that import torch once and then run a batch of
programs of world size W one after another. Every program creates its own groups with
`new_group(..., timeout=T)`, so a hang ends in a timeout on that program's groups only; the
workers then meet at a store-based barrier (a TCPStore hosted by this parent process, so it
outlives any worker) and go on with the next program on fresh groups. A worker that dies
(gloo aborts the process on a size mismatch) ends the launch: the parent labels the program,
kills the launch and starts a new one for the rest.

Labels, from what the ranks did:
- ok: every rank returned from main();
- fail: some rank raised an error of its own (an exception in the program, a torch argument
  check, a gloo size error) or was aborted by gloo while the program ran;
- hang: no rank failed on its own, and some rank was still waiting in communication when its
  group's timeout expired;
- corrupt: every rank returned, but the members of some group issued different collectives
  (op, shape, dtype or root; logged per call by the worker) that gloo paired up silently —
  NCCL hangs or corrupts data on these. The `(key, value)` checks main() returns (replicas,
  all-reduced outputs) are kept as a note: values that disagree while every group's calls
  match are a data bug of the program, not a communication bug.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

TIMEOUT_MARKERS = ("timed out", "timeout")
PEER_MARKERS = ("connection closed", "connection reset", "broken pipe", "connection refused")


# The default group's timeout. Programs make their own groups with the collective timeout;
# the default group is reached through the libraries and trainers that use it (accelerate,
# Lightning, transformers), whose hangs wait this long.
DEFAULT_GROUP_TIMEOUT = 120.0


def default_timeout(world_size: int) -> float:
    """Collective timeout per program: short, longer when ranks share 2 cores."""
    return 3.0 if world_size <= 4 else 6.0


# ---------------------------------------------------------------------------------------------
# Worker side (one process per rank)


def _classify(exc: BaseException) -> str:
    text = str(exc).lower()
    if any(m in text for m in TIMEOUT_MARKERS):
        return "timeout"
    if any(m in text for m in PEER_MARKERS):
        return "peer_closed"
    return "error"


def _load(path: str, index: int):
    spec = importlib.util.spec_from_file_location(f"acc_prog_{index}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Collectives a program calls, and which argument is the tensor whose size the peers see.
LOGGED = {
    "all_reduce": 0,
    "broadcast": 0,
    "reduce": 0,
    "barrier": None,
    "all_gather": 1,
    "all_gather_into_tensor": 1,
    "reduce_scatter_tensor": 1,
    "all_to_all_single": 1,
}


def log_collectives(dist, world_size: int) -> list:
    """Record, per call of the program, (op, group ranks, shape, dtype, root): what each rank
    really issued, to tell a silent mismatch (calls of one sequence that differ across the
    members of a group, which gloo pairs up anyway) from a data bug."""
    calls: list = []
    for name, tensor_at in LOGGED.items():
        original = getattr(dist, name)

        def logged(*args, _original=original, _name=name, _at=tensor_at, **kwargs):
            try:
                group = kwargs.get("group")
                ranks = (
                    dist.get_process_group_ranks(group)
                    if group is not None
                    else list(range(world_size))
                )
                t = args[_at] if _at is not None and len(args) > _at else None
                root = kwargs.get("src", kwargs.get("dst"))
                shape = list(t.shape) if t is not None else None
                dtype = str(t.dtype).removeprefix("torch.") if t is not None else None
                calls.append([_name, ranks, shape, dtype, root])
            except Exception:  # a call on a group this rank is not in: nothing to log
                pass
            return _original(*args, **kwargs)

        setattr(dist, name, logged)
    return calls


def worker(
    port: int,
    rank: int,
    world_size: int,
    timeout: float,
    paths: list[str],
    group_timeout: float = DEFAULT_GROUP_TIMEOUT,
) -> None:
    import torch.distributed as dist
    from torch.distributed import PrefixStore, TCPStore

    calls = log_collectives(dist, world_size)

    store = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=120))
    dist.init_process_group(
        "gloo",
        store=PrefixStore("default_pg", store),
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=group_timeout),
    )
    c10d = dist.distributed_c10d
    barrier_wait = timedelta(seconds=4 * timeout + 90)
    for i, path in enumerate(paths):
        before = set(c10d._world.pg_map)
        started = time.monotonic()
        calls.clear()
        result: dict = {"rank": rank}
        try:
            mod = _load(path, i)
            mod.TIMEOUT = timeout
            checks = mod.main(rank, world_size)
            result.update(status="ok", checks=[[str(k), float(v)] for k, v in checks])
        except SystemExit as exc:
            result.update(status="error", error=f"SystemExit({exc.code})")
        except Exception as exc:  # every failure of the program is data, not a crash
            tb = traceback.extract_tb(exc.__traceback__)
            user = [f for f in tb if f.filename == path]
            where = f"line {user[-1].lineno}" if user else ""
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            result.update(
                status=_classify(exc),
                error=f"{type(exc).__name__}: {first}",
                where=where,
            )
        result["seconds"] = round(time.monotonic() - started, 3)
        result["calls"] = calls[:400]
        store.set(f"res/{i}/{rank}", json.dumps(result))
        keys = [f"res/{i}/{r}" for r in range(world_size)]
        try:
            store.wait(keys, barrier_wait)
        except Exception:
            os._exit(3)
        statuses = [json.loads(store.get(k))["status"] for k in keys]
        # DTensor keeps caches keyed by group names: keep the groups of mesh programs alive.
        if all(s == "ok" for s in statuses) and "DeviceMesh" not in Path(path).read_text():
            # Nothing is pending on these groups: release their sockets. Groups of a program
            # that hung or failed are abandoned instead (destroying a wedged group can hang).
            for pg in set(c10d._world.pg_map) - before:
                with contextlib.suppress(Exception):
                    dist.destroy_process_group(pg)
    store.set(f"exit/{rank}", "1")
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# Parent side


@dataclass
class Outcome:
    label: str
    ranks: list[dict]
    seconds: float
    timeout: float
    note: str = ""
    mismatched: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        d = {
            "label": self.label,
            "seconds": round(self.seconds, 2),
            "timeout": self.timeout,
            "ranks": self.ranks,
        }
        if self.note:
            d["note"] = self.note
        if self.mismatched:
            d["mismatched"] = self.mismatched
        return d


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _abort_reason(stderr_path: Path) -> str:
    try:
        text = stderr_path.read_text(errors="replace")
    except OSError:
        return ""
    for line in reversed(text.splitlines()):
        if "what():" in line:
            return line.split("what():", 1)[1].strip()[:300]
    return ""


def mismatched_groups(ranks: list[dict]) -> list[str]:
    """Groups whose members issued different collective sequences (op, shape, dtype, root)."""
    per_group: dict[tuple, dict[int, list]] = {}
    for r in ranks:
        for op, members, shape, dtype, root in r.get("calls", []):
            key = tuple(members)
            per_group.setdefault(key, {}).setdefault(r["rank"], []).append(
                (op, tuple(shape or ()), dtype, root)
            )
    bad = []
    for key, seqs in sorted(per_group.items()):
        present = [seqs.get(m, []) for m in key if m < len(ranks)]
        if any(s != present[0] for s in present[1:]):
            bad.append("group " + ",".join(map(str, key)))
    return bad


def disagreeing_checks(ranks: list[dict]) -> list[str]:
    """Check keys whose values differ across the ranks that report them."""
    values: dict[str, list[float]] = {}
    for r in ranks:
        for key, value in r.get("checks", []):
            values.setdefault(key, []).append(value)
    bad = []
    for key, vs in sorted(values.items()):
        ref = max((abs(v) for v in vs if math.isfinite(v)), default=1.0) or 1.0
        if any(not math.isfinite(v) for v in vs) or max(vs) - min(vs) > 1e-4 * ref + 1e-6:
            bad.append(key)
    return bad


def label_of(ranks: list[dict]) -> tuple[str, list[str]]:
    """ok / hang / fail / corrupt from the per-rank results.

    corrupt = every rank returned, but the members of some group issued different collectives
    (gloo paired them up anyway). Replicas that disagree while every group's calls match are a
    data bug, not a communication bug: the label stays ok and the disagreement is noted."""
    statuses = [r["status"] for r in ranks]
    if any(s in ("error", "died") for s in statuses):
        return "fail", []
    if any(s != "ok" for s in statuses):
        return "hang", []
    bad = mismatched_groups(ranks)
    return ("corrupt" if bad else "ok"), bad


def run_batch(
    paths: list[str],
    world_size: int,
    timeout: float,
    log=print,
    group_timeout: float = DEFAULT_GROUP_TIMEOUT,
    python: list[str] | None = None,
) -> list[Outcome]:
    """Run programs of one world size, relaunching after a worker dies; one Outcome each.
    `python`: the interpreter command of the workers (default `sys.executable`; the tests
    pass their warm stand-in, tests/warm_python.py)."""
    from torch.distributed import TCPStore

    outcomes: list[Outcome] = []
    remaining = list(paths)
    while remaining:
        port = _free_port()
        store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
        tmp = Path(tempfile.mkdtemp(prefix="acc_run_"))
        procs = []
        errs = []
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        for rank in range(world_size):
            err = tmp / f"rank{rank}.err"
            errs.append(err)
            cmd = [
                "nice",
                "-n",
                "10",
                *(python or [sys.executable]),
                "-m",
                "bench.accuracy.runner",
                "--worker",
                json.dumps([port, rank, world_size, timeout, remaining, group_timeout]),
            ]
            procs.append(
                subprocess.Popen(
                    cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err.open("w")
                )
            )
        done_here = 0
        try:
            for i, path in enumerate(remaining):
                keys = [f"res/{i}/{r}" for r in range(world_size)]
                started = time.monotonic()
                # Start-up (imports) of the first program of a launch is not the program's.
                limit = max(4 * timeout, group_timeout) + 60 + (120 if i == 0 else 0)
                died_at: float | None = None
                while True:
                    have = [k for k in keys if store.check([k])]
                    if len(have) == world_size:
                        break
                    dead = [r for r, p in enumerate(procs) if p.poll() is not None]
                    now = time.monotonic()
                    if dead and died_at is None:
                        died_at = now
                    if died_at is not None and (
                        len(have) + len(dead) >= world_size or now - died_at > 2 * timeout + 5
                    ):
                        break
                    if now - started > limit:
                        break
                    time.sleep(0.05)
                ranks = []
                for r in range(world_size):
                    k = f"res/{i}/{r}"
                    if store.check([k]):
                        ranks.append(json.loads(store.get(k)))
                    elif procs[r].poll() is not None:
                        reason = _abort_reason(errs[r]) or f"exit code {procs[r].returncode}"
                        ranks.append({"rank": r, "status": "died", "error": reason})
                    else:
                        ranks.append({"rank": r, "status": "stuck"})
                label, bad = label_of(ranks)
                if label == "ok" and disagreeing_checks(ranks):
                    bad = ["data only: " + ", ".join(disagreeing_checks(ranks))]
                for r in ranks:  # the call log decided the label; keep only its length
                    r["collectives"] = len(r.pop("calls", []))
                wall = time.monotonic() - started
                first_t = next(
                    (r.get("seconds") for r in ranks if r.get("seconds") is not None), None
                )
                if i == 0 and first_t is not None:
                    wall = max(r.get("seconds", 0) for r in ranks)
                note = ""
                if any(r["status"] == "stuck" for r in ranks):
                    note = "a rank never returned; the launch was stopped by the runner"
                outcomes.append(Outcome(label, ranks, wall, timeout, note, bad))
                done_here += 1
                log(f"  {Path(path).stem}: {label} ({wall:.1f}s)")
                if len(ranks) != world_size or any(r["status"] in ("died", "stuck") for r in ranks):
                    break
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            del store
        remaining = remaining[done_here:]
    return outcomes


def _worker_main(spec: str) -> None:
    port, rank, world_size, timeout, paths, group_timeout = json.loads(spec)
    worker(port, rank, world_size, timeout, paths, group_timeout)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker_main(sys.argv[2])
    else:
        print("internal module: use `python -m bench.accuracy.label`", file=sys.stderr)
        sys.exit(2)
