"""`commlint check PATH...`: the static linter (CPython's `ast`; never imports or runs the code)."""

from __future__ import annotations

import argparse
import contextlib
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
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files or folders (default: .); `-` reads the source from standard input",
    )
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
    p.add_argument(
        "--stdin-filename",
        metavar="PATH",
        help="the name of the source read from standard input (`-`), for messages, "
        "per-file-ignores and project context",
    )
    p.add_argument(
        "--add-noqa",
        action="store_true",
        help="write `# noqa: CODES` on every line with findings (baseline a repository)",
    )
    p.add_argument(
        "--fix",
        action="store_true",
        help="take the codes that suppress nothing (CL113) out of `# noqa` comments; "
        "with `-`, the fixed source is written to stdout and the report to stderr",
    )
    p.set_defaults(func=run)


def _codes(spec: str | None) -> list[str] | None:
    if spec is None:
        return None
    return [c.strip().upper() for c in spec.split(",") if c.strip()]


def _error(message: str) -> int:
    print(f"commlint: error: {message}", file=sys.stderr)
    return 2


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def run(args: argparse.Namespace) -> int:
    from commlint.lint.config import check_selectors, load_config
    from commlint.lint.engine import LintOptions, lint_paths

    paths: list[str] = args.paths or (["-"] if args.stdin_filename else ["."])
    stdin = "-" in paths
    if stdin and len(paths) > 1:
        return _error("`-` (standard input) cannot be combined with other paths")
    if args.add_noqa and (args.fix or stdin):
        what = "--fix" if args.fix else "standard input (`-`)"
        return _error(f"--add-noqa cannot be combined with {what}")
    if stdin and args.diff:
        return _error("--diff cannot be used with standard input (`-`)")
    name = args.stdin_filename or "-"
    try:
        config = load_config(
            [name if args.stdin_filename else "."] if stdin else paths, args.config
        )
        for flag, spec in (
            ("--select", args.select),
            ("--ignore", args.ignore),
            ("--extend-select", args.extend_select),
        ):
            check_selectors(_codes(spec) or [], flag)
    except CommlintInputError as exc:
        return _error(exc.error.one_line() if exc.error.path else exc.error.message)
    for warning in config.warnings:
        print(f"commlint: warning: {warning}", file=sys.stderr)
    if args.jobs < 0:
        return _error("-j/--jobs must be >= 0")
    opts = LintOptions(
        select=_codes(args.select),
        ignore=_codes(args.ignore) or [],
        extend_select=_codes(args.extend_select) or [],
        jobs=args.jobs,
        cache=not args.no_cache,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        diff_ref=args.diff,
        context=not args.no_context,
        stdin=(name, sys.stdin.buffer.read()) if stdin else None,
    )
    report: Report = lint_paths(paths, config, opts)
    # selection is already applied (config + flags, ruff semantics)
    args.select = None
    args.ignore = None
    if args.add_noqa:
        return _add_noqa(report)
    if args.fix:
        return _fix(report, args, opts.stdin)
    return emit(report, args)


def _add_noqa(report: Report) -> int:
    from commlint.lint.edits import add_noqa_files

    added, errors = add_noqa_files(report.findings)
    for err in [*report.errors, *errors]:
        print(f"commlint: error: {err.one_line()}", file=sys.stderr)
    print(f"Added {_plural(added, 'noqa directive')}.", file=sys.stderr)
    return 2 if report.errors or errors else 0


def _fix(report: Report, args: argparse.Namespace, stdin: tuple[str, bytes] | None) -> int:
    from commlint.lint.edits import edit_text, fix_files, is_fixed, remove_unused, unused_noqa
    from commlint.lint.source import Unreadable

    fixed, errors = fix_files(report.findings, skip=stdin[0] if stdin else None)
    fixed_source = stdin[1] if stdin else None
    if stdin is not None:
        wanted = unused_noqa(report.findings).get(stdin[0], {})
        with contextlib.suppress(Unreadable):  # reported as CL100 already
            fixed_source, _ = edit_text(
                stdin[1], lambda text, w: remove_unused(text, w, fixed, stdin[0]), wanted
            )
    report.errors.extend(errors)
    before = len(report.findings)
    report.findings = [f for f in report.findings if not is_fixed(f, fixed)]
    n_fixed = before - len(report.findings)
    if fixed_source is not None:
        # as ruff: the fixed source on stdout, the report beside it on stderr
        with contextlib.redirect_stdout(sys.stderr):
            code = emit(report, args)
        sys.stdout.flush()
        sys.stdout.buffer.write(fixed_source)
        sys.stdout.buffer.flush()
    else:
        code = emit(report, args)
    if n_fixed:
        remaining = len(report.findings)
        print(f"Fixed {_plural(n_fixed, 'finding')} ({remaining} remaining).", file=sys.stderr)
    return code
