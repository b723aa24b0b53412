"""Flight Recorder: commlint vs PyTorch's fr_trace on the same synthetic dumps (issue 12).

Writes NCCL-shaped dumps (one pickle per rank, `rank_<r>`, `pg_config` filled as NCCL fills
it, 8 frames per entry, each distinct frame pickled once and referenced by every entry that
has it, as torch's own dump writer does) for R ranks × E entries: all-reduces alternating
between TP groups of 8 and DP groups of R/8, every entry `completed` except each rank's last
one (`started`, the collective the job hangs in). Then runs, each as a child process of this one:

- peer: `python -m torch.distributed.flight_recorder.fr_trace DIR` (torch's analyzer);
- `python -m commlint plan DIR --format json` (read, align, compare, check, report);
- before: the same command with the `commlint/` of an earlier commit (`--before=REV`, default:
  main before the input gate of issue 32; `--before=none` skips it), extracted by
  bench/revision.py and run from bytecode like the current one;

and prints CPU seconds and peak RSS of each child (os.wait4) and the ratio. Goal (issue 12):
commlint >= 10x less CPU than fr_trace at 256 ranks x 2,000 entries. Each tool runs
`--repeat=N` times (3 by default), the two interleaved; the ratio is given best run against
best run (as `timeit` reports) and median against median: on a shared machine one run of
either may take 10% longer than the next.

    nice -n 10 python bench/flight_recorder.py                 # 256 x 2,000
    nice -n 10 python bench/flight_recorder.py 64 4000
    nice -n 10 python bench/flight_recorder.py 1024 1000 --no-peer   # commlint alone
    nice -n 10 python bench/flight_recorder.py 256 2000 --scheduled  # gloo-like states
    nice -n 10 python bench/flight_recorder.py --dir=/tmp/fr256       # keep the dumps
    nice -n 10 python bench/flight_recorder.py 64 4000 --memory       # bytes per entry
    nice -n 10 python bench/flight_recorder.py --before=5468e90       # another "before"

`--memory`: bytes of resident memory per checked entry held after reading every dump, with
the kept frames (of entries that did not complete) shared when equal (as past `SHARE_AFTER`
entries) and not shared, each in a child process.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TP = 8

_TORCH = "/opt/venv/lib/python3.11/site-packages/torch/distributed"
TORCH_FRAMES = [
    ("all_reduce", f"{_TORCH}/distributed_c10d.py", 3245),
    ("wrapper", f"{_TORCH}/c10d_logger.py", 83),
]
USER_FRAMES = [
    ("reduce_grads", "/job/model/parallel.py", 120),
    ("backward_step", "/job/train.py", 88),
    ("train", "/job/train.py", 140),
    ("main", "/job/train.py", 200),
    ("<module>", "/job/train.py", 210),
    ("_run_module_as_main", "/usr/lib/python3.11/runpy.py", 198),
]


_FRAMES: dict[tuple, dict] = {}


def _frame(name: str, filename: str, line: int) -> dict:
    """One frame dict per distinct frame, referenced by every entry that has it: torch's
    dump writer memoizes frames this way (in a real dump, `e1["frames"][0] is
    e2["frames"][0]` for two calls from one line), so the pickle holds each frame once."""
    key = (name, filename, line)
    frame = _FRAMES.get(key)
    if frame is None:
        frame = _FRAMES[key] = {"name": name, "filename": filename, "line": line}
    return frame


def write_dumps(folder: Path, ranks: int, entries: int, scheduled: bool = False) -> None:
    dp = ranks // TP
    pg_config = {"0": {"name": "0", "desc": "default_pg", "ranks": json.dumps(list(range(ranks)))}}
    for t in range(ranks // TP):
        name = str(1 + t)
        pg_config[name] = {
            "name": name,
            "desc": "tp",
            "ranks": json.dumps(list(range(t * TP, (t + 1) * TP))),
        }
    for d in range(TP):
        name = str(1 + ranks // TP + d)
        pg_config[name] = {
            "name": name,
            "desc": "dp",
            "ranks": json.dumps(list(range(d, ranks, TP))),
        }
    for r in range(ranks):
        tp_pg = str(1 + r // TP)
        dp_pg = str(1 + ranks // TP + r % TP)
        seq = {tp_pg: 0, dp_pg: 0}
        rows = []
        for i in range(entries):
            pg, desc = (tp_pg, "tp") if i % 2 == 0 else (dp_pg, "dp")
            seq[pg] += 1
            line = 120 + (i % 7)
            frames = [_frame(n, f, ln) for n, f, ln in TORCH_FRAMES]
            frames += [
                _frame(n, f, line if k == 0 else ln) for k, (n, f, ln) in enumerate(USER_FRAMES)
            ]
            last = i == entries - 1
            rows.append(
                {
                    "record_id": i,
                    "pg_id": int(pg),
                    "process_group": (pg, desc),
                    "collective_seq_id": seq[pg],
                    "p2p_seq_id": 0,
                    "op_id": i + 1,
                    "profiling_name": "nccl:all_reduce",
                    "time_created_ns": 1_000_000 * (i + 1),
                    "input_sizes": [[1024, 64 if desc == "tp" else dp]],
                    "input_dtypes": ["BFloat16"],
                    "output_sizes": [[1024, 64 if desc == "tp" else dp]],
                    "output_dtypes": ["BFloat16"],
                    "state": "scheduled" if scheduled else ("started" if last else "completed"),
                    "time_discovered_started_ns": None,
                    "time_discovered_completed_ns": None,
                    "retired": not last,
                    "timeout_ms": 600000,
                    "is_p2p": False,
                    "frames": frames,
                    "thread_id": "1",
                    "thread_name": "python",
                }
            )
        dump = {
            "version": "2.10",
            "comm_lib_version": "2.27.5",
            "pg_config": pg_config,
            "pg_status": {},
            "entries": rows,
        }
        (folder / f"rank_{r}").write_bytes(pickle.dumps(dump, protocol=4))


# main before the input gate, the size limits and the isolated parsing of issue 32
BEFORE = "c48773c"


def run_child(cmd: list[str], tree: Path | None = None) -> tuple[float, float, float, int]:
    """(CPU s, wall s, peak RSS MB, exit code) of one child process; `tree`: a folder holding
    an earlier commit's `commlint/`, put first on the child's PYTHONPATH."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return cpu, wall, usage.ru_maxrss / 1024, proc.returncode


def memory_child(folder: str, share: bool) -> None:
    """Prints the resident bytes per entry that the checked entries of every dump hold."""
    import gc

    from commlint.plans.importers import flight_recorder as fr

    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    gc.disable()
    files = fr.dump_files(Path(folder))
    before = rss()
    held = [
        fr._checked_dump(fr.read_dump(f), str(f), share=share, reread=fr._reader(f))
        for f in files.values()
    ]
    n = sum(len(cols) for cols, _, _ in held)
    print((rss() - before) / n)


def memory(folder: Path) -> None:
    per = {}
    for share in (False, True):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(folder), str(int(share))],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        per[share] = float(out.split()[-1])
    print(
        f"  bytes per checked entry: {per[False]:,.0f} not shared, {per[True]:,.0f} shared "
        f"({per[False] / per[True]:.1f}x less); shared past {_share_after():,} entries"
    )


def _share_after() -> int:
    from commlint.plans.importers.flight_recorder import SHARE_AFTER

    return SHARE_AFTER


def main(argv: list[str]) -> int:
    if argv[:1] == ["--memory-child"]:
        memory_child(argv[1], argv[2] == "1")
        return 0
    nums = [int(a) for a in argv if a.isdigit()]
    ranks, entries = (nums + [256, 2000][len(nums) :])[:2]
    peer = "--no-peer" not in argv
    scheduled = "--scheduled" in argv
    keep = next((a.split("=", 1)[1] for a in argv if a.startswith("--dir=")), None)
    repeat = int(next((a.split("=", 1)[1] for a in argv if a.startswith("--repeat=")), "3"))
    before = next((a.split("=", 1)[1] for a in argv if a.startswith("--before=")), BEFORE)
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="fr_bench_"))
        folder = Path(keep or tmp)
        t0 = time.perf_counter()
        if not (folder / f"rank_{ranks - 1}").exists():  # --dir=DIR: write once, reuse
            folder.mkdir(parents=True, exist_ok=True)
            write_dumps(folder, ranks, entries, scheduled)
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(
            f"{ranks} ranks x {entries:,} entries = {ranks * entries:,} entries, "
            f"{size / 1e6:.0f} MB of pickles (written in {time.perf_counter() - t0:.1f} s); "
            f"states: {'all scheduled (gloo-like)' if scheduled else 'completed, last started'}"
        )
        if "--memory" in argv:
            memory(folder)
            return 0
        # both tools run from bytecode, as installed packages do (torch's wheel ships it; a
        # checkout under PYTHONDONTWRITEBYTECODE would compile commlint's modules every run)
        import commlint

        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(Path(commlint.__file__).parent)],
            check=True,
        )
        ours = [sys.executable, "-m", "commlint", "plan", str(folder), "--format", "json"]
        theirs = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder)]
        runs: dict[str, list[tuple[float, float, float, int]]] = {
            "commlint": [],
            "fr_trace": [],
            "before": [],
        }
        old = None
        if before != "none":
            from revision import describe, tree

            print(f"  before: {describe(before)}")
            old = stack.enter_context(tree(before))
        for _ in range(repeat):  # interleaved, so a noisy moment of the machine hits all
            runs["commlint"].append(run_child(ours))
            if peer:
                runs["fr_trace"].append(run_child(theirs))
            if old is not None:
                runs["before"].append(run_child(ours, old))
        for name, label in (
            ("commlint", "commlint plan  "),
            ("before", "before         "),
            ("fr_trace", "peer: fr_trace "),
        ):
            if not runs[name]:
                continue
            cpus = sorted(r[0] for r in runs[name])
            cpu, wall, rss, code = min(runs[name])
            rate = f"  ({ranks * entries / cpu:,.0f} entries/CPU s)" if name != "fr_trace" else ""
            spread = f" (of {len(cpus)}: {cpus[0]:.2f}–{cpus[-1]:.2f})" if len(cpus) > 1 else ""
            print(
                f"  {label} CPU {cpu:7.2f} s{spread}  wall {wall:7.2f} s  "
                f"peak RSS {rss:7.0f} MB  exit {code}{rate}"
            )
        if peer:
            cpu, _, rss, _ = min(runs["commlint"])
            pcpu, _, prss, _ = min(runs["fr_trace"])
            median = statistics.median(p[0] for p in runs["fr_trace"]) / statistics.median(
                r[0] for r in runs["commlint"]
            )
            print(
                f"  ratio: commlint uses {pcpu / cpu:.1f}x less CPU, best run against best run "
                f"({median:.1f}x median against median; goal >= 10x) and "
                f"{prss / rss:.1f}x less memory"
            )
        if runs["before"]:
            cpu, _, rss, _ = min(runs["commlint"])
            bcpu, _, brss, _ = min(runs["before"])
            print(
                f"  after/before: CPU x{cpu / bcpu:.2f}, memory x{rss / brss:.2f} "
                "(best run against best run)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
