"""The Slurm launcher (`commlint run --launcher slurm`): the ranks split into shares, each
share recorded by one Slurm task with the local launcher, through submitit; the shares'
results merged into one dry-run, checked once — the array recipe of docs/dryrun.md, run and
collected for you.

Slurm tasks have no channel to each other while they run. Within a task values flow live, as
on one machine; between tasks they flow by rounds: after each round, a task whose ranks would
receive something else from another task's ranks (a broadcast plan, the files a barrier hands
over, a reduced flag) records again with what every rank sent, delivered as values of an
earlier pass are (`DryRunOptions.values`) — until nothing changes (`MAX_ROUNDS`). Shares that
fell back to real tensors make every share record with real tensors, so the merged traces
come from one mode.

submitit moves each task's function and result through a folder every node sees
(`--slurm-folder`, removed after a successful run), as Slurm jobs always do; the ranks of a
task run on its node. `--slurm-option cluster=local` runs the tasks as local processes
(submitit's LocalExecutor): the same path without a Slurm cluster, used by the tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import replace
from typing import Any

from commlint.plans.dryrun.driver import DryRunOptions, DryRunResult, dry_run, stale_ranks
from commlint.plans.dryrun.launch import LauncherError, NodeUsage
from commlint.plans.dryrun.merge import rank_spec
from commlint.plans.dryrun.values import ValueTable

MAX_DEFAULT_TASKS = 32  # shares when --slurm-tasks is not given: one per node, at most this
MAX_ROUNDS = 8  # rounds of tasks that deliver values sent in other tasks


def shares(ranks: list[int], tasks: int) -> list[list[int]]:
    """`ranks` in `tasks` contiguous shares of nearly equal size (none empty)."""
    tasks = max(1, min(tasks, len(ranks)))
    size, extra = divmod(len(ranks), tasks)
    out, i = [], 0
    for t in range(tasks):
        n = size + (1 if t < extra else 0)
        out.append(ranks[i : i + n])
        i += n
    return out


def parse_options(pairs: list[str]) -> tuple[str, dict[str, Any]]:
    """`--slurm-option KEY=VALUE` items → (cluster, submitit parameters); ValueError on a bad
    item. Numbers become numbers (`timeout_min=30`, `cpus_per_task=8`)."""
    cluster, params = "slurm", {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--slurm-option: {pair!r} is not KEY=VALUE (e.g. timeout_min=30)")
        key, value = key.strip(), value.strip()
        if key == "cluster":
            if value not in ("slurm", "local"):
                raise ValueError(f"--slurm-option cluster={value}: one of slurm, local")
            cluster = value
            continue
        number: Any = value
        with contextlib.suppress(ValueError):
            number = float(value) if "." in value else int(value)
        params[key] = number
    return cluster, params


def _record_share(options: DryRunOptions, cwd: str) -> DryRunResult:
    """One Slurm task: its share of the ranks, recorded with the local launcher."""
    os.chdir(cwd)
    return dry_run(replace(options, launcher="local"))


def record(
    options: DryRunOptions,
    tasks: int | None,
    slurm_options: list[str],
    folder: str,
    jobs: int | None,
) -> DryRunResult:
    """Record `options.ranks` in Slurm tasks (submitit) and merge them into one result."""
    try:
        import submitit
    except ImportError:
        raise LauncherError(
            "--launcher slurm needs submitit: pip install 'commlint[slurm]' (or pip install "
            "submitit)"
        ) from None
    try:
        cluster, params = parse_options(slurm_options)
    except ValueError as exc:
        raise LauncherError(str(exc)) from None
    if cluster == "slurm" and shutil.which("sbatch") is None:
        raise LauncherError(
            "--launcher slurm: Slurm's sbatch is not on PATH (not a Slurm login node?); "
            "--slurm-option cluster=local runs the tasks here with submitit's local executor"
        )
    nodes = max(1, options.world_size // max(1, options.nproc_per_node))
    parts = shares(options.ranks, tasks or min(nodes, MAX_DEFAULT_TASKS))
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    try:
        executor.update_parameters(name="commlint-dryrun", **params)
    except (ValueError, TypeError) as exc:
        raise LauncherError(f"--slurm-option: {str(exc).splitlines()[0]}") from None
    cwd = os.getcwd()
    base = replace(options, jobs=jobs or 0)
    results = _run(executor, [replace(base, ranks=p) for p in parts], cwd)
    modes = {r.mode for r in results}
    if len(modes) > 1:  # fake and real tensors can take different paths: one mode for all
        base = replace(base, mode="real")
        again = [i for i, r in enumerate(results) if r.mode != "real"]
        for i, r in zip(
            again, _run(executor, [replace(base, ranks=parts[i]) for i in again], cwd), strict=True
        ):
            results[i] = r
    rounds = 1
    while rounds < MAX_ROUNDS:
        # what every task's ranks sent, delivered to the tasks whose ranks would receive
        # something else than in their last run (a value sent in another task)
        table = _values(results)
        runs = {r: run for res in results for r, run in res.runs.items()}
        stale = set(stale_ranks(runs, table))
        again = [i for i, p in enumerate(parts) if stale & set(p)]
        if not again:
            break
        rounds += 1
        shares_again = [replace(base, ranks=parts[i], values=table) for i in again]
        for i, r in zip(again, _run(executor, shares_again, cwd), strict=True):
            results[i] = r
    else:
        runs = {r: run for res in results for r, run in res.runs.items()}
        stale = set(stale_ranks(runs, _values(results)))
    merged = merge(results, cluster, rounds, sorted(stale))
    with contextlib.suppress(OSError):
        shutil.rmtree(folder)
    return merged


def _values(results: list[DryRunResult]) -> ValueTable:
    table = ValueTable()
    for res in results:
        for rank, run in res.runs.items():
            table.replace_rank(rank, run.sent)
    return table


def _run(executor: Any, shares: list[DryRunOptions], cwd: str) -> list[DryRunResult]:
    jobs = executor.map_array(_record_share, shares, [cwd] * len(shares))
    out = []
    for job, share in zip(jobs, shares, strict=True):
        try:
            out.append(job.result())
        except Exception as exc:
            first = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
            raise LauncherError(
                f"--launcher slurm: the task recording ranks {rank_spec(share.ranks)} failed "
                f"(job {job.job_id}, log {job.paths.stderr}): {first}"
            ) from None
    return out


def merge(
    results: list[DryRunResult], cluster: str, rounds: int = 1, unsettled: list[int] | None = None
) -> DryRunResult:
    """One dry-run from the shares' results: every rank's run, the passes of the longest
    share in each round; `unsettled`: ranks whose values from other tasks still changed."""
    runs = {}
    notes: list[str] = []
    usage = []
    for i, r in enumerate(results):
        runs.update(r.runs)
        notes.extend(n for n in r.notes if n not in notes)
        for u in r.usage:
            usage.append(
                NodeUsage(f"task {i} ({u.node})", u.ranks, u.cpu_seconds, u.peak_rank_bytes)
            )
    if len(results) > 1:
        notes.append(
            f"recorded by {len(results)} Slurm tasks ({cluster}) in {rounds} round"
            f"{'s' if rounds != 1 else ''}: values sent in another task arrive one round later"
        )
    return DryRunResult(
        runs=runs,
        passes=max(r.passes for r in results) + rounds - 1,
        mode=results[0].mode,
        notes=notes,
        converged=all(r.converged for r in results) and not unsettled,
        seconds=max(r.seconds for r in results),
        unsettled=sorted({u for r in results for u in r.unsettled} | set(unsettled or ())),
        steering=[s for r in results for s in r.steering],
        usage=usage,
    )
