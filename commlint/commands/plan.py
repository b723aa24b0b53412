"""`commlint plan PATH...`: check trace / plan files (a folder: every *.yaml, *.yml, *.json)."""

from __future__ import annotations

import argparse

from commlint.commands.common import add_output_options, emit
from commlint.findings import CommlintInputError, InputError, Report

INPUT_FORMATS = ("auto", "trace", "fr", "nnscaler", "pipelining-csv", "sketchdlc")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="check trace / plan files for deadlocks, hangs and mismatches",
        description="Check trace / plan files (YAML or JSON, format version 1). A folder "
        "means every *.yaml, *.yml and *.json in it.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="plan files or folders; or Flight Recorder dumps, nnScaler gencode folders, "
        "pipelining CSVs, SketchDLC traces (see --input-format)",
    )
    p.add_argument(
        "--model",
        default=None,
        choices=("gloo", "nccl", "single-queue", "all"),
        help="queue model (default: the trace's backend, else gloo)",
    )
    p.add_argument(
        "--max-cycles", type=int, default=32, help="elementary cycles to report per trace"
    )
    p.add_argument(
        "--symmetry",
        default="on",
        choices=("on", "orbits", "off"),
        help="generated plans: check one rank per symmetry orbit (on: findings still name "
        "every rank; orbits: report the representatives' findings, fastest; off: every rank)",
    )
    p.add_argument(
        "--input-format",
        default="auto",
        choices=INPUT_FORMATS,
        help="what PATH holds (default auto: by content and name): a plan file or folder of "
        "them (trace), Flight Recorder dumps (fr), nnScaler gencode{rank}.py files "
        "(nnscaler), a torch.distributed.pipelining schedule .csv (pipelining-csv), "
        "SketchDLC trace files (sketchdlc)",
    )
    p.add_argument(
        "--groups",
        default=None,
        metavar="FILE|JSON",
        help="Flight Recorder dumps that do not list a process group's members (gloo): "
        'the members, as JSON (\'{"1": [0, 1], "WORLD": [0, 1]}\': group name or '
        "description → global ranks) or a JSON/YAML file holding it",
    )
    p.add_argument(
        "--allow-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder besides a plan's own that files the plan names (generate.schedule.csv) "
        "may come from; repeatable (default: only the plan's folder)",
    )
    add_output_options(p)
    p.set_defaults(func=run)


def _inputs(args: argparse.Namespace):
    """(path, problem, format) for every input; plan folders expand to their files."""
    from commlint.plans.importers.detect import detect_format
    from commlint.plans.io import input_problem, iter_plan_files

    fmt = getattr(args, "input_format", "auto")
    for given in args.paths:
        problem = input_problem(given)  # before anything opens it (a FIFO blocks)
        if problem:
            yield given, problem, fmt
            continue
        kind = detect_format(given) if fmt == "auto" else fmt
        if kind == "trace":
            for path, problem in iter_plan_files([given]):
                yield path, problem, kind
        else:
            yield given, None, kind


def run(args: argparse.Namespace) -> int:
    # the checker and the importers load when a plan is checked, not when any command starts
    from commlint.graph.check import check_trace
    from commlint.plans.dryrun.merge import check_parts, job_key
    from commlint.plans.importers.detect import load_any
    from commlint.plans.importers.flight_recorder import (
        finish_findings,
        load_flight_recorder,
        read_groups_option,
    )
    from commlint.plans.io import LoadedTrace

    report = Report()
    fr_groups = None
    if getattr(args, "groups", None):
        try:
            fr_groups = read_groups_option(args.groups)
        except CommlintInputError as exc:
            report.errors.append(exc.error)
    allow = getattr(args, "allow_path", None) or []
    traces = {}  # for reports that draw the traces (html)
    partial: dict[tuple, list] = {}
    symmetry = {"on": True, "orbits": "orbits", "off": False}[getattr(args, "symmetry", "on")]
    for path, problem, kind in _inputs(args):
        if problem:
            report.errors.append(InputError(path=path, message=problem))
            continue
        try:
            if kind == "fr":
                loaded = LoadedTrace(load_flight_recorder(path, groups=fr_groups), path)
            else:
                loaded = load_any(path, kind, allow)
            key = job_key(loaded.trace)
            if key is not None:  # a part of a dry-run: checked with the others
                partial.setdefault(key, []).append((path, loaded.trace))
                continue
            result = check_trace(
                loaded.trace, args.model, path, loaded.lines, args.max_cycles, symmetry=symmetry
            )
            if kind == "fr":  # at the source lines the dumps name, with the reader's findings
                finish_findings(loaded.trace, result.findings)
        except CommlintInputError as exc:
            report.errors.append(exc.error)
            continue
        except Exception as exc:
            # a bug of ours on this input: say which input, and go on with the others
            report.errors.append(
                InputError(path=path, message=f"internal error: {type(exc).__name__}: {exc}")
            )
            continue
        report.findings.extend(result.findings)
        report.checked += 1
        if args.format == "html":
            traces[path] = loaded.trace
    for parts in partial.values():
        check_parts(parts, args, report)
    args.report_options = {"traces": traces}
    return emit(report, args)
