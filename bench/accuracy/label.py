"""Label the benchmark programs by running them for real (see runner.py for the labels).

    python -m bench.accuracy.label                     # every program without a label
    python -m bench.accuracy.label --world-size 2 --limit 40
    python -m bench.accuracy.label --ids mlp_w2_0000 gpt_w4_0001 --force
    python -m bench.accuracy.label --exclude-family dtensor --world-size 6 --world-size 8
    python -m bench.accuracy.label --sample 6 --check  # re-run a sample, compare to labels
    python -m bench.accuracy.label --family lightning --jobs 3  # 3 launches at once

A program is labelled again when its text changed since its label (the label keeps a hash).
DTensor programs run one per launch (see `needs_own_launch`): about 30 s each here.

Labels go to bench/accuracy/labels.json after every chunk, so a long run can be stopped and
resumed. Runs under `nice -n 10`; programs of one world size share a launch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from bench.accuracy.runner import DEFAULT_GROUP_TIMEOUT, default_timeout, run_batch

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "programs.json"
LABELS = HERE / "labels.json"


def program_sha(path: Path) -> str:
    """The label holds for this exact program text."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def load_manifest() -> list[dict]:
    return json.loads(MANIFEST.read_text())["programs"]


def load_labels() -> dict:
    if LABELS.exists():
        return json.loads(LABELS.read_text())
    return {"about": "", "labels": {}}


def save_labels(data: dict) -> None:
    import torch

    data["about"] = (
        "Ground truth of bench/accuracy/programs: each program run for real with gloo on CPU "
        f"(torch {torch.__version__}) by bench/accuracy/runner.py; "
        "labels ok / hang / fail / corrupt (see runner.py)."
    )
    out = dict(data, labels=dict(sorted(data["labels"].items())))
    tmp = LABELS.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(LABELS)


def needs_own_launch(prog: dict) -> bool:
    """DTensor caches meshes by their ranks, not their groups: a later program on the same
    ranks would reuse an earlier program's (possibly wedged) groups. accelerate's `prepare`
    wraps the model in DDP on the default group, which a hang wedges for every later program
    of the launch; so do Lightning's and transformers' `Trainer`. torchtitan's gradient
    clipping reduces a DTensor norm over its mesh, which meets DTensor's caches too. Run
    these alone."""
    text = (HERE / prog["path"]).read_text()
    marks = ("parallelize_module", "Accelerator(", "Trainer(", "from torchtitan")
    return any(mark in text for mark in marks)


def _launches(progs: list[dict], chunk: int) -> list[list[dict]]:
    shared = [p for p in progs if not needs_own_launch(p)]
    alone = [[p] for p in progs if needs_own_launch(p)]
    return [shared[i : i + chunk] for i in range(0, len(shared), chunk)] + alone


def rerun(
    programs: list[dict],
    chunk: int,
    timeout: float | None,
    jobs: int = 1,
    group_timeout: float = DEFAULT_GROUP_TIMEOUT,
) -> dict[str, dict]:
    """Run programs (grouped by world size, `chunk` per launch, `jobs` launches at once);
    {id: outcome json}. Launches at once share the cores: a hang waits idle, but ranks that
    compute slow each other down, so keep `jobs` to programs that mostly wait."""
    by_world: dict[int, list[dict]] = {}
    for p in programs:
        by_world.setdefault(p["world_size"], []).append(p)
    launches = [
        (world, timeout or default_timeout(world), part)
        for world, progs in sorted(by_world.items())
        for part in _launches(progs, chunk)
    ]
    out: dict[str, dict] = {}
    lock = threading.Lock()

    def launch(world: int, t: float, part: list[dict]) -> None:
        began = time.monotonic()
        lines = [f"world size {world}: {len(part)} programs (timeout {t:g}s)"]
        outcomes = run_batch(
            [str(HERE / p["path"]) for p in part],
            world,
            t,
            log=lines.append,
            group_timeout=group_timeout,
        )
        lines.append(f"  chunk wall {time.monotonic() - began:.0f}s")
        with lock:
            print("\n".join(lines), flush=True)
            for p, o in zip(part, outcomes, strict=True):
                out[p["id"]] = o.to_json()
            _on_chunk({p["id"]: out[p["id"]] for p in part})

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for f in [pool.submit(launch, *spec) for spec in launches]:
            f.result()
    return out


_CHUNK_HOOKS: list = []


def _on_chunk(part: dict) -> None:
    for hook in _CHUNK_HOOKS:
        hook(part)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Label benchmark programs by running them for real.")
    p.add_argument("--ids", nargs="*", help="only these program ids")
    p.add_argument("--world-size", type=int, action="append", help="only this world size")
    p.add_argument("--family", action="append", help="only this family (e.g. dtensor)")
    p.add_argument("--exclude-family", action="append", help="leave this family out")
    p.add_argument("--limit", type=int, help="at most this many programs")
    p.add_argument("--force", action="store_true", help="relabel programs that have a label")
    p.add_argument("--chunk", type=int, default=40, help="programs per launch (default 40)")
    p.add_argument("--timeout", type=float, help="collective timeout, seconds")
    p.add_argument(
        "--jobs", type=int, default=1, help="launches at once (default 1; hangs wait idle)"
    )
    p.add_argument(
        "--group-timeout",
        type=float,
        default=DEFAULT_GROUP_TIMEOUT,
        help=f"the default group's timeout, seconds (default {DEFAULT_GROUP_TIMEOUT:g})",
    )
    p.add_argument("--sample", type=int, help="re-run a random sample of labelled programs")
    p.add_argument("--seed", type=int, default=None, help="seed of --sample")
    p.add_argument("--check", action="store_true", help="compare with stored labels, no write")
    args = p.parse_args(argv)

    programs = load_manifest()
    data = load_labels()
    labels = data["labels"]
    if args.ids:
        wanted = set(args.ids)
        programs = [q for q in programs if q["id"] in wanted]
    if args.world_size:
        programs = [q for q in programs if q["world_size"] in args.world_size]
    if args.family:
        programs = [q for q in programs if q["family"] in args.family]
    if args.exclude_family:
        programs = [q for q in programs if q["family"] not in args.exclude_family]
    if args.sample:
        rng = random.Random(args.seed)
        pool = [q for q in programs if q["id"] in labels]
        programs = rng.sample(pool, min(args.sample, len(pool)))
    elif not args.force and not args.check:
        # Unlabelled, or labelled for another text of the program (regenerated since).
        programs = [
            q
            for q in programs
            if q["id"] not in labels
            or labels[q["id"]].get("sha", program_sha(HERE / q["path"]))
            != program_sha(HERE / q["path"])
        ]
    if args.limit:
        programs = programs[: args.limit]
    if not programs:
        print("nothing to run")
        return 0

    by_id = {q["id"]: q for q in load_manifest()}
    if not args.check:

        def keep(part: dict) -> None:
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            for pid, o in part.items():
                sha = program_sha(HERE / by_id[pid]["path"])
                labels[pid] = dict(o, labelled=stamp, sha=sha)
            save_labels(data)

        _CHUNK_HOOKS.append(keep)
    began = time.monotonic()
    got = rerun(programs, args.chunk, args.timeout, args.jobs, args.group_timeout)
    wall = time.monotonic() - began
    print(f"{len(got)} programs in {wall:.0f}s ({wall / len(got):.2f}s per program)")
    print(" labels:", dict(Counter(o["label"] for o in got.values())))
    if args.check:
        differ = {
            pid: (labels.get(pid, {}).get("label"), o["label"])
            for pid, o in got.items()
            if labels.get(pid, {}).get("label") != o["label"]
        }
        for pid, (was, now) in sorted(differ.items()):
            print(f" {pid}: stored {was}, re-run {now}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
