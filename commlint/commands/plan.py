"""`commlint plan PATH...`: check trace / plan files (a folder: every *.yaml, *.yml, *.json)."""

from __future__ import annotations

import argparse

from commlint.commands.common import add_output_options, emit
from commlint.findings import CommlintInputError, InputError, Report
from commlint.graph.check import check_trace
from commlint.plans.io import iter_plan_files, load_trace


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="check trace / plan files for deadlocks, hangs and mismatches",
        description="Check trace / plan files (YAML or JSON, format version 1). A folder "
        "means every *.yaml, *.yml and *.json in it.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="plan files or folders")
    p.add_argument(
        "--model",
        default=None,
        choices=("gloo", "nccl", "single-queue", "all"),
        help="queue model (default: the trace's backend, else gloo)",
    )
    p.add_argument(
        "--max-cycles", type=int, default=32, help="elementary cycles to report per trace"
    )
    add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = Report()
    for path, problem in iter_plan_files(args.paths):
        if problem:
            report.errors.append(InputError(path=path, message=problem))
            continue
        try:
            loaded = load_trace(path)
        except CommlintInputError as exc:
            report.errors.append(exc.error)
            continue
        result = check_trace(loaded.trace, args.model, path, loaded.lines, args.max_cycles)
        report.findings.extend(result.findings)
        report.checked += 1
    return emit(report, args)
