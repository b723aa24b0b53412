"""`--format text`: one block per finding, the wait-for cycle drawn, and a fix hint."""

from __future__ import annotations

from typing import IO, Any

from commlint.findings import CycleEdge, Finding, Report
from commlint.report.common import printable


def draw_cycle(cycle: list[CycleEdge]) -> str:
    """`rank 0 ─all_reduce(tp0) @train.py:41─▶ rank 1 ─barrier(WORLD) @train.py:57─▶ rank 0`"""
    parts = []
    if len(cycle) > 8:  # the JSON output keeps every edge
        hidden = len(cycle) - 6
        cycle = [
            *cycle[:5],
            CycleEdge(rank=-1, action=-1, op=f"… {hidden} more", waits_for=-1),
            cycle[-1],
        ]
    for e in cycle:
        if e.rank == -1:
            parts.append(f"{e.op} ─▶ ")
            continue
        site = f" @{e.site}" if e.site else ""
        parts.append(f"rank {e.rank} ─{e.op}{site}─▶ ")
    return "".join(parts) + f"rank {cycle[0].rank}"


def header(f: Finding) -> str:
    return f"{f.where()}: {f.code} [{f.severity}] {f.name}"


def block(f: Finding) -> list[str]:
    lines = [header(f), f"  {f.message}"]
    if f.cycle:
        lines.append(f"  {draw_cycle(f.cycle)}")
    for rel in f.related:
        if rel.path and rel.line:
            lines.append(f"  note: {rel.path}:{rel.line}: {rel.message or ''}".rstrip())
    if f.models:
        lines.append(f"  model: {', '.join(f.models)}")
    if f.fix:
        lines.append(f"  fix: {f.fix}")
    return lines


def summary_line(report: Report) -> str:
    s = report.summary()
    n = s["findings"]
    # an input that could not be read was not checked: never call that a pass
    k = len(report.errors)
    unread = f"; {k} input{'s' if k != 1 else ''} could not be checked (errors above)" if k else ""
    # a dry-run's verdict holds for the device it played
    target = f"; target: {report.target}" if report.target else ""
    if report.ranks:  # rank classes: what was recorded, what derived
        r = report.ranks
        target += f"; ranks: {r['recorded']} recorded, {r['derived']} derived"
    if not n:
        if k:
            return f"No findings in {report.checked} checked{unread}{target}."
        if not report.checked:  # a pass over nothing is no pass (a partial dry-run, no files)
            return f"Nothing was checked{target}."
        return f"All checks passed ({report.checked} checked{target})."
    return (
        f"Found {n} finding{'s' if n != 1 else ''} "
        f"({s['errors']} error{'s' if s['errors'] != 1 else ''}, "
        f"{s['warnings']} warning{'s' if s['warnings'] != 1 else ''}) "
        f"in {report.checked} checked{unread}{target}."
    )


def write(report: Report, stream: IO[str], options: dict[str, Any]) -> None:
    for f in report.findings:
        stream.write("\n".join(map(printable, block(f))) + "\n\n")
    stream.write(summary_line(report) + "\n")
