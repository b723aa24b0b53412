"""Limits of `commlint plan` on hostile and large plan files: what is handled, at what cost.

Each case runs `commlint plan FILE` in its own child process and prints its exit code, wall
time and peak RSS (`os.wait4`'s rusage of that child alone). The peer, on the first line, is
the same command on a two-rank plan: the fixed cost every case pays.

    python bench/limits_plans.py          # about a minute
    python bench/limits_plans.py --big    # adds a 1,048,576-action plan, a 131,072-rank generate:
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from commlint.plans.generate import MAX_GENERATED_WORLD
from commlint.plans.io import MAX_DEPTH
from commlint.trace import MAX_WORLD_SIZE


def run(path: Path) -> tuple[int, float, float, str]:
    """(exit code, wall seconds, peak RSS in MB, first error line) of `commlint plan path`."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "commlint", "plan", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    err = proc.stderr.read() if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    first = err.strip().splitlines()[0] if err.strip() else ""
    return proc.returncode, wall, usage.ru_maxrss / 1024, first


def tp_dp_plan(world: int, per_rank: int) -> dict:
    """`world` ranks × `per_rank` all-reduces alternating between TP groups of 8 and DP
    groups of world/8 (the plan of issue 12)."""
    groups = {f"tp{t}": list(range(t * 8, t * 8 + 8)) for t in range(world // 8)}
    groups.update({f"dp{d}": list(range(d, world, 8)) for d in range(8)})
    ranks = {}
    for r in range(world):
        tp, dp = f"tp{r // 8}", f"dp{r % 8}"
        ranks[str(r)] = [
            {"op": "all_reduce", "group": tp if i % 2 == 0 else dp, "shape": [1024]}
            for i in range(per_rank)
        ]
    return {"version": 1, "world_size": world, "groups": groups, "ranks": ranks}


def write_json_plan(path: Path, world: int, per_rank: int) -> Path:
    with path.open("w") as fh:
        json.dump(tp_dp_plan(world, per_rank), fh, separators=(",", ":"))
    return path


def write_yaml_plan(path: Path, world: int, per_rank: int) -> Path:
    plan = tp_dp_plan(world, per_rank)
    lines = [f"version: 1\nworld_size: {world}\ngroups:"]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in plan["groups"].items()]
    lines.append("ranks:")
    for r, acts in plan["ranks"].items():
        lines.append(f"  {r}:")
        lines += ["    - " + json.dumps(a) for a in acts]
    path.write_text("\n".join(lines) + "\n")
    return path


def cases(tmp: Path, big: bool) -> list[tuple[str, Path]]:
    out = []

    def text(name: str, body: str) -> Path:
        p = tmp / name
        p.write_text(body)
        return p

    out.append(("peer: 2 ranks, 2 actions", text("small.yaml", _small())))
    nest = "version: 1\nworld_size: 2\nmeta: {a: "
    ok_depth = MAX_DEPTH - 4
    out.append(
        (
            f"YAML nested {ok_depth} deep",
            text("d1.yaml", nest + "[" * ok_depth + "]" * ok_depth + "}"),
        )
    )
    out.append(
        ("YAML nested 30,000 deep", text("d2.yaml", nest + "[" * 30_000 + "]" * 30_000 + "}"))
    )
    jnest = '{"version": 1, "world_size": 2, "meta": '
    out.append(("JSON nested 1,000 deep", text("d3.json", jnest + "[" * 1000 + "]" * 1000 + "}")))
    out.append(
        ("world_size 5,000 digits", text("w0.yaml", "version: 1\nworld_size: " + "9" * 5000))
    )
    out.append(
        (
            f"world_size {MAX_WORLD_SIZE}, no actions",
            text("w1.yaml", f"version: 1\nworld_size: {MAX_WORLD_SIZE}"),
        )
    )
    out.append(("world_size 1,000,000,000", text("w2.yaml", "version: 1\nworld_size: 1000000000")))
    out.append(
        (
            "generate: world_size 1e9",
            text("g0.yaml", "version: 1\ngenerate: {world_size: 1000000000}"),
        )
    )
    gen_world = MAX_GENERATED_WORLD if big else 16_384
    out.append(
        (
            f"generate: {gen_world} ranks tp8 pp4 mb8",
            text(
                "g1.yaml",
                f"version: 1\ngenerate: {{world_size: {gen_world}, "
                "degrees: {tp: 8, pp: 4}, microbatches: 8}",
            ),
        )
    )
    laughs = ["version: 1", "world_size: 2", "meta:", "  a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    laughs += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    out.append(("YAML aliases expanding to 10^9 values", text("a.yaml", "\n".join(laughs) + "\n")))
    out.append(("YAML plan 64 ranks × 1,024 actions", write_yaml_plan(tmp / "y64.yaml", 64, 1024)))
    out.append(
        ("JSON plan 256 ranks × 1,024 actions", write_json_plan(tmp / "j256.json", 256, 1024))
    )
    if big:
        out.append(
            (
                "JSON plan 1,024 ranks × 1,024 actions",
                write_json_plan(tmp / "j1024.json", 1024, 1024),
            )
        )
    return out


def _small() -> str:
    return "version: 1\nworld_size: 2\nranks: {0: [{op: barrier}], 1: [{op: barrier}]}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help="add the largest cases (minutes)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'case':44} {'bytes':>11} {'exit':>4} {'wall s':>8} {'peak MB':>8}  first error")
        peer = None
        for name, path in cases(Path(tmp), args.big):
            code, wall, rss, err = run(path)
            peer = peer or (wall, rss)
            ratio = f"(×{wall / peer[0]:.1f} t, ×{rss / peer[1]:.1f} mem)"
            print(
                f"{name:44} {path.stat().st_size:>11} {code:>4} {wall:>8.2f} {rss:>8.0f}  "
                f"{ratio} {err[:110]}"
            )


if __name__ == "__main__":
    main()
