"""Options and output shared by subcommands."""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext

from commlint.findings import Finding, Report
from commlint.report import FORMATS, write_report
from commlint.report.common import printable
from commlint.report.statistics import write_statistics


def add_output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        "--output-format",
        dest="format",
        default="text",
        choices=tuple(FORMATS),
        help="output format (default: text)",
    )
    p.add_argument("-o", "--output-file", help="write the report to this file instead of stdout")
    p.add_argument("--select", help="comma-separated rule codes or prefixes to report (e.g. CL2)")
    p.add_argument("--ignore", help="comma-separated rule codes or prefixes to leave out")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    p.add_argument(
        "--statistics", action="store_true", help="print the number of findings per rule only"
    )


def _codes(spec: str | None) -> list[str]:
    return [c.strip().upper() for c in (spec or "").split(",") if c.strip()]


def selected(finding: Finding, select: str | None, ignore: str | None) -> bool:
    sel, ign = _codes(select), _codes(ignore)
    if sel and "ALL" not in sel and not any(finding.code.startswith(s) for s in sel):
        return False
    return not any(finding.code.startswith(i) for i in ign)


def emit(report: Report, args: argparse.Namespace) -> int:
    """Filter, print errors (one line each, stderr), write the report, return the exit code."""
    report.findings = [
        f for f in report.findings if selected(f, getattr(args, "select", None), args.ignore)
    ]
    report.findings.sort(key=Finding.sort_key)
    sys.stdout.flush()
    for err in report.errors:
        print(f"commlint: error: {printable(err.one_line())}", file=sys.stderr)
    options = getattr(args, "report_options", {})
    with open(args.output_file, "w", encoding="utf-8") if args.output_file else nullcontext() as fh:
        out = fh or sys.stdout
        if getattr(args, "statistics", False):
            write_statistics(report, out, "json" if args.format == "json" else "text")
        else:
            write_report(report, args.format, out, **options)
    code = report.exit_code()
    if code == 1 and args.exit_zero:
        return 0
    return code
