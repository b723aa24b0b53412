"""`commlint check PATH...`: the static linter (LibCST; never imports or runs the code)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from commlint.commands.common import add_output_options, emit
from commlint.findings import CommlintInputError, Report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="lint Python source for communication deadlocks and hangs",
        description="Lint Python files (a folder: every *.py in it) for communication bugs "
        "that hang distributed PyTorch jobs: collectives only some ranks call, early exits, "
        "wrong groups and roots, send/send cycles, unwaited handles. The code is parsed, "
        "never imported or run. Settings come from [tool.commlint] in the nearest "
        "pyproject.toml; flags override them.",
    )
    p.add_argument("paths", nargs="*", default=["."], metavar="PATH", help="files or folders")
    add_output_options(p)
    p.add_argument(
        "--extend-select", help="comma-separated codes or prefixes to add to the selection"
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="parse files in N processes (default: one per CPU when there are many files)",
    )
    p.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    p.add_argument(
        "--cache-dir", help="cache folder (default: .commlint_cache next to pyproject.toml)"
    )
    p.add_argument(
        "--diff", metavar="REF", help="report only findings on lines changed since git REF"
    )
    p.add_argument("--config", metavar="PYPROJECT", help="use this pyproject.toml")
    p.add_argument(
        "--no-context",
        action="store_true",
        help="files given one by one (as pre-commit passes the changed files) are analysed "
        "alone; by default the rest of their project is analysed too, for the helpers they "
        "call and the callers of what they change, and findings caused through them in "
        "unchanged files are reported",
    )
    p.set_defaults(func=run)


def _codes(spec: str | None) -> list[str] | None:
    if spec is None:
        return None
    return [c.strip().upper() for c in spec.split(",") if c.strip()]


def run(args: argparse.Namespace) -> int:
    from commlint.lint.config import check_selectors, load_config
    from commlint.lint.engine import LintOptions, lint_paths

    try:
        config = load_config(args.paths, args.config)
        for flag, spec in (
            ("--select", args.select),
            ("--ignore", args.ignore),
            ("--extend-select", args.extend_select),
        ):
            check_selectors(_codes(spec) or [], flag)
    except CommlintInputError as exc:
        where = exc.error.one_line() if exc.error.path else exc.error.message
        print(f"commlint: error: {where}", file=sys.stderr)
        return 2
    for warning in config.warnings:
        print(f"commlint: warning: {warning}", file=sys.stderr)
    if args.jobs < 0:
        print("commlint: error: -j/--jobs must be >= 0", file=sys.stderr)
        return 2
    opts = LintOptions(
        select=_codes(args.select),
        ignore=_codes(args.ignore) or [],
        extend_select=_codes(args.extend_select) or [],
        jobs=args.jobs,
        cache=not args.no_cache,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        diff_ref=args.diff,
        context=not args.no_context,
    )
    report: Report = lint_paths(args.paths, config, opts)
    # selection is already applied (config + flags, ruff semantics)
    args.select = None
    args.ignore = None
    return emit(report, args)
