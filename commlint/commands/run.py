"""`commlint run [torchrun flags] train.py ARGS...`: dry-run the real program, then check it.

Every simulated rank runs the script on CPU with computation on fake tensors, records its
communication, and the merged trace goes to the same checker as `commlint plan`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from commlint.commands.common import add_output_options, emit
from commlint.commands.launcher import (
    ASSUMED_GPUS_PER_NODE,
    NEEDS_TORCH,
    LaunchError,
    RunParser,
    nnodes_spec,
    nproc_spec,
    resolve_launch,
)
from commlint.findings import InputError, Report


def parse_ranks(spec: str, world_size: int) -> list[int]:
    """`0-127,256,300-301` → sorted ranks; raises ValueError with a readable message."""
    ranks: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ValueError(f"--ranks: {part!r} is not a rank or a range like 0-127") from None
        if a > b:
            raise ValueError(f"--ranks: empty range {part!r}")
        if b >= world_size or a < 0:
            raise ValueError(f"--ranks: {part!r} is outside 0-{world_size - 1}")
        ranks.update(range(a, b + 1))
    if not ranks:
        raise ValueError("--ranks: no ranks given")
    return sorted(ranks)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def parse_size(text: str) -> int | None:
    """`1G`, `512M`, `2GiB`, `0`, `none` (no limit) → bytes; ArgumentTypeError otherwise."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    if t in ("none", "inf", "unlimited"):
        return None
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if scale != 1 else t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 512M, 2G or none") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return int(value * scale)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        # the program's own options come after it: `train.py --out X` must not be taken for
        # an abbreviation of `--output-format` (torchrun's parser does the same)
        allow_abbrev=False,
        help="dry-run a training script for N simulated ranks on CPU and check its communication",
        description="Run the real script once per simulated rank on this CPU (computation on "
        "fake tensors, no GPU), record every communication call, and check the trace for "
        "deadlocks, hangs and mismatches. Takes torchrun's command line: every option of the "
        "installed torch's torchrun (listed last), `-m module` included.",
    )
    # torchrun's options join when this parser is used (`launcher.RunParser`): only the run
    # command imports torch.
    p.__class__ = RunParser
    p.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        type=nproc_spec,
        default=1,
        metavar="N",
        help="ranks per node, as torchrun: a number, or auto|gpu (this machine's GPUs; "
        f"{ASSUMED_GPUS_PER_NODE} assumed when it has none) or cpu (its CPUs)",
    )
    p.add_argument(
        "--nnodes",
        type=nnodes_spec,
        default=1,
        metavar="M",
        help="number of nodes; torchrun's MIN:MAX simulates MAX",
    )
    p.add_argument(
        "--node-rank",
        "--node_rank",
        type=int,
        default=None,
        metavar="K",
        help="record only the ranks of node K (default: every node)",
    )
    p.add_argument(
        "--ranks",
        default=None,
        metavar="SPEC",
        help="record only these global ranks, e.g. 0-127 or 0,5,8-15",
    )
    p.add_argument(
        "--steps",
        type=_positive,
        default=None,
        metavar="S",
        help="stop each rank after S optimizer steps",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=60.0,
        metavar="SEC",
        help="time limit per rank and pass (default: 60)",
    )
    p.add_argument(
        "--model",
        default=None,
        choices=("gloo", "nccl", "single-queue", "all"),
        help="queue model (default: the backend the script asks for)",
    )
    p.add_argument(
        "--save-trace",
        default=None,
        metavar="DIR",
        help="write one trace file per rank to DIR (check later: commlint plan DIR)",
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=_positive,
        default=None,
        metavar="J",
        help="ranks recorded at once (default: the number of CPUs)",
    )
    p.add_argument(
        "--rank-classes",
        action="store_true",
        help="record one rank per program path and derive the others: a rank whose path "
        "condition (every test of a value derived from its rank) a recorded rank's holds "
        "for takes that rank's path, with its peers, roots and groups re-evaluated; ranks "
        "whose path depends on anything else are recorded themselves (the verdict says how "
        "many ranks were recorded and how many derived)",
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="the machine the job runs on: cuda (GPUs, played by stand-ins; the default) or "
        "cpu (no GPU: torch.cuda.is_available() is False). Without it, ACCELERATE_USE_CPU "
        "set true in the environment means cpu, as accelerate takes it",
    )
    p.add_argument(
        "--tensors",
        choices=("fake", "real"),
        default="fake",
        help="fake: no memory or FLOPs, real values re-recorded when the program "
        "reads them; real: small real CPU tensors from the start",
    )
    p.add_argument(
        "--max-passes",
        type=_positive,
        default=argparse.SUPPRESS,  # DryRunOptions' own default
        metavar="P",
        help="passes to deliver values between ranks (default: 48; most programs take 1-3, "
        "a program checking gradient sync over many steps about one per step)",
    )
    p.add_argument(
        "--real-budget",
        type=parse_size,
        default=argparse.SUPPRESS,  # DryRunOptions' own default (REAL_BUDGET)
        metavar="SIZE",
        help="largest automatic re-run with real tensors, in tensor memory per rank (e.g. "
        "512M, 4G; 0: never; none: no limit). Past it nothing is computed for real: a test "
        "of a value fake tensors did not compute is taken alike on every rank and, for a "
        "rank-local value, its other outcome recorded too (CL211); any other use stops the "
        "rank there (default: 1G)",
    )
    p.add_argument(
        "-t",
        "--tee",
        default="0",
        metavar="SPEC",
        help="ranks whose own output (stdout and stderr of the script) is shown on stderr, "
        "each line prefixed `[rank N]:` as torchrun's --tee: a rank spec like 0,2-3, `all` "
        "or `none` (default: 0); torchrun's LOCAL_RANK:STREAM form (0:3,1:1) shows those "
        "local ranks of every node, a bare number is a rank",
    )
    p.add_argument(
        "--launcher",
        choices=("local", "ray", "slurm"),
        default="local",
        help="where the rank processes run: local (forked on this machine; the default), ray "
        "(spread over the nodes of the Ray cluster RAY_ADDRESS names, or a local one; values "
        "between ranks travel through Ray: pip install 'commlint[ray]'), slurm (the ranks "
        "split into --slurm-tasks Slurm tasks through submitit, each recorded locally, merged "
        "into one verdict; values sent in another task arrive a round later: pip install "
        "'commlint[slurm]')",
    )
    p.add_argument(
        "--slurm-tasks",
        type=_positive,
        default=None,
        metavar="N",
        help="with --launcher slurm: Slurm tasks the ranks are split into (default: one per "
        "simulated node, at most 32)",
    )
    p.add_argument(
        "--slurm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --launcher slurm: a submitit parameter for every task, e.g. "
        "slurm_partition=cpu, timeout_min=30, cpus_per_task=8, mem_gb=16 (repeatable); "
        "cluster=local runs the tasks here with submitit's local executor",
    )
    p.add_argument(
        "--slurm-folder",
        default="commlint-slurm",
        metavar="DIR",
        help="with --launcher slurm: submitit's folder for the tasks' pickles and logs, on a "
        "filesystem every node sees (default: ./commlint-slurm, removed after a run)",
    )
    add_output_options(p)
    p.add_argument("program", metavar="train.py", help="the training script (with -m: the module)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from commlint.plans.dryrun.merge import fold_follow_ons, locate_at_site, rank_spec, split_site

    report = Report()
    if importlib.util.find_spec("torch") is None:
        print(f"commlint: error: {NEEDS_TORCH}", file=sys.stderr)
        return 2
    needs = {"ray": ("ray", "ray"), "slurm": ("submitit", "slurm")}.get(args.launcher)
    if needs and importlib.util.find_spec(needs[0]) is None:
        print(
            f"commlint: error: --launcher {args.launcher} needs {needs[0]}, which is not "
            f"installed: pip install 'commlint[{needs[1]}]'",
            file=sys.stderr,
        )
        return 2
    try:
        launch = resolve_launch(args)
    except LaunchError as exc:
        print(f"commlint: error: {exc}", file=sys.stderr)
        return 2
    program = launch.program
    if not launch.module and not Path(program).is_file():
        report.errors.append(InputError(path=program, message="no such file"))
        return emit(report, args)
    nproc, nnodes = launch.nproc_per_node, launch.nnodes
    world = nproc * nnodes
    try:
        if args.ranks:
            ranks = parse_ranks(args.ranks, world)
        elif args.node_rank is not None:
            if not 0 <= args.node_rank < nnodes:
                raise ValueError(f"--node-rank {args.node_rank} is outside 0-{nnodes - 1}")
            first = args.node_rank * nproc
            ranks = list(range(first, first + nproc))
        else:
            ranks = list(range(world))
    except ValueError as exc:
        print(f"commlint: error: {exc}", file=sys.stderr)
        return 2

    if len(ranks) < world and not args.save_trace:
        # only the whole job can be checked: a part is kept for `commlint plan`, or the run
        # would do all its work and check nothing
        flag = "--ranks" if args.ranks else "--node-rank"
        print(
            f"commlint: error: {flag} records ranks {rank_spec(ranks)} of {world} and checks "
            "nothing on its own: add --save-trace DIR, then check every part together with "
            "`commlint plan DIR`",
            file=sys.stderr,
        )
        return 2
    try:
        tee = _tee_ranks(args.tee, world, nproc)
    except ValueError as exc:
        print(f"commlint: error: --tee: {exc}", file=sys.stderr)
        return 2
    note = launch.note()
    if note:
        print(f"commlint: note: {note}", file=sys.stderr)
    device, report.target = resolve_target(args.device, {**os.environ, **launch.env})

    from commlint.plans.dryrun.driver import DryRunOptions, default_jobs

    options = DryRunOptions(
        program=program,
        args=args.args[1:] if args.args[:1] == ["--"] else list(args.args),
        world_size=world,
        nproc_per_node=nproc,
        ranks=ranks,
        timeout=args.timeout,
        steps=args.steps,
        # local: this machine's CPUs; ray: the cluster's (0: the launcher's default)
        jobs=args.jobs or (default_jobs() if args.launcher == "local" else 0),
        mode=args.tensors,
        model=args.model,
        module=launch.module,
        env=launch.env,
        device=device,
        launcher="local" if args.launcher == "slurm" else args.launcher,
        rank_classes=args.rank_classes,
        **({"max_passes": args.max_passes} if "max_passes" in args else {}),
        **({"real_budget": args.real_budget} if "real_budget" in args else {}),
    )
    from commlint.plans.dryrun.launch import LauncherError
    from commlint.plans.dryrun.procs import Interrupted

    try:
        if args.launcher == "slurm":
            from commlint.plans.dryrun.slurm_launcher import record

            result = record(
                options, args.slurm_tasks, args.slurm_option, args.slurm_folder, args.jobs
            )
        else:
            result = _record(options)
    except LauncherError as exc:
        print(f"commlint: error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        # a CI cancel, a closed terminal, Ctrl-C: every rank and every process it started
        # was stopped before getting here (`procs.Keeper`)
        print(
            f"commlint: error: interrupted by {exc.name}: the dry-run was stopped, with every "
            "rank and every process the ranks started; nothing was checked",
            file=sys.stderr,
        )
        return 128 + exc.signum
    _show_output(result, tee)
    if args.launcher != "local":
        for u in result.usage:
            print(
                f"commlint: note: {args.launcher} node {u.node}: {u.ranks} rank runs, "
                f"{u.cpu_seconds:.1f} CPU s, largest rank {u.peak_rank_bytes / 2**20:.0f} MB",
                file=sys.stderr,
            )
    if options.rank_classes:
        derived = len(result.derived)
        report.ranks = {"recorded": len(result.runs) - derived, "derived": derived}
    for note in result.notes:
        print(f"commlint: note: {note}", file=sys.stderr)
    incomplete = result.incomplete()
    stopped = {i.rank for i in incomplete}
    crashed = _crashed_everywhere(result, ranks, program)
    for rank in sorted(result.runs):
        run = result.runs[rank]
        if run.leftover:
            print(
                f"commlint: note: rank {rank} left {run.leftover} process"
                f"{'es' if run.leftover != 1 else ''} it started running; "
                f"{'they were' if run.leftover != 1 else 'it was'} killed with it",
                file=sys.stderr,
            )
        end = run.end
        if not end or crashed or rank in stopped or _clean_exit(end):
            continue
        if len(ranks) < world and end["kind"] != "exit":
            continue  # an error below
        verb = {"exception": "raised", "exit": "exited", "timeout": "was stopped"}[end["kind"]]
        where = f" at {end['site']}" if end.get("site") else ""
        print(f"commlint: note: rank {rank} {verb}{where}: {end['message']}", file=sys.stderr)
    # What was recorded is saved whatever happened next: it is the evidence.
    if args.save_trace:
        _save(result, options, Path(args.save_trace))

    def error_at(site: str | None, message: str) -> None:
        path, line = split_site(site)
        report.errors.append(InputError(path=path or program, line=line, message=message))

    for i in incomplete:
        error_at(
            i.site,
            f"rank {i.rank} did not reach the end of {program}: {i.why}; the verdict covers "
            "only what the ranks did before",
        )
    if len(ranks) < world:
        # Nothing is checked here, but a recorded rank that raised or was stopped did not
        # run its program to the end: said as an error, never a silent "Nothing was checked"
        if crashed:
            report.errors.append(crashed)
        for rank in sorted(result.runs):
            end = result.runs[rank].end
            if crashed or rank in stopped or not end or end["kind"] == "exit":
                continue
            verb = "raised" if end["kind"] == "exception" else "was stopped:"
            error_at(
                end.get("site"),
                f"rank {rank} {verb} {end['message']}; the rest of its program was not recorded",
            )
        print(
            f"commlint: note: recorded ranks {rank_spec(ranks)} of {world}; check every rank "
            f"together with `commlint plan {args.save_trace}`",
            file=sys.stderr,
        )
        return emit(report, args)

    from commlint.graph.align import explain
    from commlint.graph.check import check_trace

    trace = result.trace(options)
    checked = check_trace(trace, args.model, program, None)
    for f in checked.findings:
        locate_at_site(f, trace)
        f.path = f.path or program
    explain(checked.findings, trace)
    report.findings.extend(fold_follow_ons(checked.findings, trace))
    report.checked += 1
    if not any(run.actions for run in result.runs.values()) and not report.errors and not crashed:
        report.errors.append(
            InputError(
                path=program,
                message="no rank communicated: not one collective or point-to-point call was "
                "recorded, so nothing was checked (does the program reach its distributed "
                "code with these arguments?)",
            )
        )
    if crashed:
        if any(f.severity == "error" for f in checked.findings):
            # A real run hangs (or fails on the hang) before any rank gets to the exception.
            print(
                f"commlint: note: after that, {crashed.one_line()} — a real run stops at the "
                "finding above first",
                file=sys.stderr,
            )
        else:
            report.errors.append(crashed)
    if args.format == "html":  # the report's rank × sequence grids are drawn from the trace
        args.report_options = {"traces": {program: trace}}
    code = emit(report, args)
    from commlint.commands.run_coverage import print_coverage

    print_coverage(result.runs, program, _shown)  # after the verdict, on stderr
    return code


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


_TRUE = ("1", "y", "yes", "t", "true", "on")  # accelerate's `str_to_bool`


def resolve_target(explicit: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """The device the job runs on, and the words the verdict line gives it.

    An explicit `--device` wins: it says what the machine has, and a variable left over in
    the shell must not overrule what was typed (the program still sees the variable:
    accelerate on GPUs told `ACCELERATE_USE_CPU=1` computes on the CPU, and so does the
    dry-run). Without it, `ACCELERATE_USE_CPU` set true means a CPU job — the job the
    command line describes — else GPUs, the job being gated."""
    if explicit:
        return explicit, f"{explicit} (--device {explicit})"
    value = env.get("ACCELERATE_USE_CPU", "")
    if value.strip().lower() in _TRUE:
        return "cpu", f"cpu (ACCELERATE_USE_CPU={value}; --device cuda checks it on GPUs)"
    return "cuda", "cuda (the default; --device cpu checks a CPU job)"


def _clean_exit(end: dict) -> bool:
    """`sys.exit(0)` / `os._exit(0)`: the script's end, only worth a word when it strands
    a peer (the checker then names the line)."""
    return end.get("kind") == "exit" and end.get("message") in (
        "sys.exit(0)",
        "sys.exit(None)",
        "os._exit(0)",
    )


def _tee_ranks(spec: str, world: int, nproc_per_node: int) -> set[int]:
    if spec == "none":
        return set()
    if spec == "all":
        return set(range(world))
    if ":" in spec:
        # torchrun's LOCAL_RANK:STREAM,... (stream 0: none, 1: stdout, 2: stderr, 3: both):
        # the local ranks with a stream, on every node
        local = set()
        for part in spec.split(","):
            lr, _, stream = part.partition(":")
            if not (lr.strip().isdigit() and stream.strip() in ("0", "1", "2", "3")):
                raise ValueError(f"{part!r} is not a rank range or torchrun's LOCAL_RANK:0-3")
            if int(lr) >= nproc_per_node:
                raise ValueError(f"local rank {lr} is outside 0-{nproc_per_node - 1}")
            if stream.strip() != "0":
                local.add(int(lr))
        return {r for r in range(world) if r % nproc_per_node in local}
    try:
        return set(parse_ranks(spec, world))
    except ValueError as exc:
        if spec.strip() in ("1", "2", "3"):  # torchrun's stream number, pasted
            raise ValueError(
                f"{exc.args[0].removeprefix('--ranks: ')} (commlint's --tee takes ranks, not "
                "torchrun's stream number: `all` shows every rank)"
            ) from None
        raise


def _show_output(result: Any, tee: set[int]) -> None:
    """The script's own output of the chosen ranks' last run, torchrun-style: on stderr
    (stdout carries the report), each line prefixed with its rank."""
    for rank in sorted(tee & set(result.runs)):
        for line in result.runs[rank].output.splitlines():
            print(f"[rank {rank}]: {line}", file=sys.stderr)


def _record(options):
    from commlint.plans.dryrun.driver import dry_run

    if not sys.stderr.isatty():
        return dry_run(options)
    from commlint.progress import progress_bar

    with progress_bar("[bold]dry-run[/] {task.description}") as progress:
        task = progress.add_task(f"pass 1 of ≤{options.max_passes}", total=len(options.ranks))

        def on_pass(n: int, count: int) -> None:
            # Rank runs of every pass so far: the clock and the ETA never start over.
            total = progress.tasks[0].total if n == 1 else progress.tasks[0].total + count
            progress.update(task, total=total, description=f"pass {n} of ≤{options.max_passes}")

        def on_done(rank: int) -> None:
            progress.advance(task)

        return dry_run(options, on_pass, on_done)


def _crashed_everywhere(result, ranks: list[int], program: str) -> InputError | None:
    """Every rank raised the same exception (or left with the same non-zero `sys.exit`) at
    the same line: the program itself is broken
    (or something the dry-run cannot stand in for): nothing after that line was seen. The
    messages may differ between ranks in numbers only (`... cuda:0` on rank 0, `cuda:1` on
    rank 1)."""
    from commlint.plans.dryrun.merge import split_site

    ends = [result.runs[r].end for r in ranks]
    failed = ("exception", "exit")  # an exception, or sys.exit(2) (argparse's, a failed check)
    if not ends or any(not e or e.get("kind") not in failed or _clean_exit(e) for e in ends):
        return None
    if any(result.runs[r].stopped for r in ranks):
        return None  # stopped by the dry-run's limits (said per rank), not by the program
    first = ends[0]

    def shape(e: dict) -> tuple[str, str | None]:
        return re.sub(r"\d+", "N", e["message"]), e.get("site")

    if any(shape(e) != shape(first) for e in ends):
        return None
    path, line = split_site(first.get("site"))
    same = all(e["message"] == first["message"] for e in ends)
    verb = "raised" if first["kind"] == "exception" else "ended with"
    return InputError(
        path=path or program,
        line=line,
        message=f"every rank {verb} {first['message']}"
        + ("" if same else f" (on rank {ranks[0]}; the others' messages differ in numbers)"),
    )


def _save(result, options, folder: Path) -> None:
    from commlint.trace_io import dump_trace

    folder.mkdir(parents=True, exist_ok=True)
    width = max(5, len(str(options.world_size - 1)))
    for rank in sorted(result.runs):
        trace = result.trace(options, [rank])
        trace.meta["partial"] = True
        dump_trace(trace, folder / f"rank-{rank:0{width}d}.yaml")
