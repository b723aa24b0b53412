"""`commlint run --launcher ray` against the local launcher, in one process tree.

A 256-rank DDP dry-run of a GPT-2-like model (`bench/dryrun_gpt2.py --parallel ddp`, 2 layers,
hidden 256: the DDP step of the GPT-2 bench, shortened) recorded twice: by the local launcher
(ranks forked from this process), then on a Ray cluster of three nodes on this machine
(`ray.cluster_utils.Cluster`, one CPU each). Both must give the same verdict (every rank's
calls and the findings). Printed per launcher and per node: wall, CPU seconds, peak memory
(the proportional set size of the node's dry-run processes: the forker and its ranks, summed
every second; pages shared after fork counted once), and the check of the same program's
trace at 16,384 ranks (every rank's recorded actions, relabelled) for the scaling in
docs/dryrun.md.

    python bench/dryrun_ray.py [--ranks 256] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PROGRAM = ROOT / "bench" / "dryrun_gpt2.py"
ARGS = ["--parallel", "ddp", "--layers", "2", "--hidden", "256"]


def pss(pid: int) -> int:
    """Proportional set size of one process, in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in os.listdir(f"/proc/{p}/task") if os.path.isdir(f"/proc/{p}/task") else ():
            try:
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            except OSError:
                pass
    return out


def cpu_of(pid: int) -> float:
    """CPU seconds of a live process (user + system)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Peak:
    """The peak, sampled every `every` seconds, of the summed PSS of each root's tree."""

    def __init__(self, roots: dict[str, int], every: float = 1.0) -> None:
        self.roots, self.every = roots, every
        self.peak = dict.fromkeys(roots, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, root in self.roots.items():
                total = sum(pss(p) for p in descendants(root))
                self.peak[name] = max(self.peak[name], total)
            self._stop.wait(self.every)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def own_cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def verdict(result, opts) -> dict:
    from commlint.graph.align import explain
    from commlint.graph.check import check_trace
    from commlint.plans.dryrun.merge import locate_at_site

    trace = result.trace(opts)
    checked = check_trace(trace, None, opts.program)
    for f in checked.findings:
        locate_at_site(f, trace)
    explain(checked.findings, trace)
    return {
        "calls": {r: [(a.op, a.group, a.site) for a in trace.ranks[r]] for r in trace.ranks},
        "ends": {r: (e.kind, e.message) for r, e in trace.ends.items()},
        "findings": sorted((f.code, f.path, f.line) for f in checked.findings),
        "incomplete": [i.rank for i in result.incomplete()],
    }


def scaled_check(result, opts, world: int) -> dict:
    """The checker on this DDP program at `world` ranks: every rank's recorded actions given
    to `world` ranks (DDP's ranks record the same calls), checked as `commlint run` does."""
    from commlint.graph.check import check_trace
    from commlint.trace import Trace

    trace = result.trace(opts)
    template = trace.ranks[0]
    big = Trace(
        world_size=world,
        groups={n: list(range(world)) if n == "WORLD" else m for n, m in trace.groups.items()},
        ranks={r: list(template) for r in range(world)},
        backend=trace.backend,
        source="dryrun",
    )  # fmt: skip
    actions = sum(len(v) for v in big.ranks.values())
    t0, c0 = time.monotonic(), time.process_time()
    checked = check_trace(big, None, opts.program)
    return {
        "world": world,
        "actions": actions,
        "check_cpu_s": round(time.process_time() - c0, 2),
        "check_wall_s": round(time.monotonic() - t0, 2),
        "findings": len(checked.findings),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--scale", type=int, default=16384)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    def options(launcher: str) -> DryRunOptions:
        return DryRunOptions(
            program=str(PROGRAM), args=ARGS, world_size=args.ranks, nproc_per_node=8,
            ranks=list(range(args.ranks)), timeout=120.0, jobs=2, launcher=launcher,
        )  # fmt: skip

    report: dict = {"ranks": args.ranks, "program": f"{PROGRAM.name} {' '.join(ARGS)}"}
    print(f"load average {os.getloadavg()[0]:.1f}; {args.ranks} ranks of {report['program']}")

    # --- local: ranks forked from this process ---------------------------------------------
    t0, (me0, kids0) = time.monotonic(), own_cpu()
    with Peak({"local": os.getpid()}) as peak:
        opts = options("local")
        local = dry_run(opts)
    me1, kids1 = own_cpu()
    local_verdict = verdict(local, opts)
    report["local"] = {
        "wall_s": round(time.monotonic() - t0, 1),
        "cpu_s": round(me1 - me0 + kids1 - kids0, 1),
        "driver_cpu_s": round(me1 - me0, 1),
        "ranks_cpu_s": round(kids1 - kids0, 1),
        "peak_mb": round(peak.peak["local"] / 2**20),
        "passes": local.passes,
    }
    print("local:", report["local"])

    # --- Ray: three nodes on this machine ---------------------------------------------------
    import ray
    from ray.cluster_utils import Cluster

    from commlint.plans.dryrun import ray_launcher

    t0 = time.monotonic()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    for _ in range(args.nodes - 1):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="error")
    cluster.wait_for_nodes()
    report["ray_cluster_start_s"] = round(time.monotonic() - t0, 1)
    try:
        t0 = time.monotonic()
        agents = ray_launcher._agents(ray)  # one per node, warmed up (torch, fake tensors)
        pids = {info["node"][:8]: info["pid"] for _, info in agents}
        report["ray_agents_start_s"] = round(time.monotonic() - t0, 1)
        agent_cpu0 = {n: cpu_of(p) for n, p in pids.items()}
        t0, (me0, _) = time.monotonic(), own_cpu()
        with Peak(pids) as peak:
            opts = options("ray")
            opts.jobs = 0  # the cluster's CPUs
            on_ray = dry_run(opts)
        me1, _ = own_cpu()
        wall = time.monotonic() - t0
        nodes = []
        for u in on_ray.usage:
            node = u.node.rpartition("(")[2].rstrip(")")
            agent_cpu = cpu_of(pids[node]) - agent_cpu0[node]
            nodes.append(
                {
                    "node": node,
                    "rank_runs": u.ranks,
                    "ranks_cpu_s": round(u.cpu_seconds, 1),
                    "agent_cpu_s": round(agent_cpu, 1),
                    "peak_mb": round(peak.peak[node] / 2**20),
                }
            )
        report["ray"] = {
            "wall_s": round(wall, 1),
            "cpu_s": round(me1 - me0 + sum(n["ranks_cpu_s"] + n["agent_cpu_s"] for n in nodes), 1),
            "driver_cpu_s": round(me1 - me0, 1),
            "passes": on_ray.passes,
            "nodes": nodes,
        }
        print("ray:", json.dumps(report["ray"], indent=1))
        same = verdict(on_ray, opts) == local_verdict
        report["same_verdict"] = same
        report["findings"] = local_verdict["findings"]
        print("same verdict as local:", same, "findings:", local_verdict["findings"])
    finally:
        ray.shutdown()
        cluster.shutdown()
    report["scaled_check"] = scaled_check(local, options("local"), args.scale)
    report["actions_per_rank"] = len(local.trace(options("local")).ranks[0])
    print("check at scale:", report["scaled_check"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
