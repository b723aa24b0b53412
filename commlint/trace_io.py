"""Writing a `Trace` as the documented plan-file YAML, beside the Trace itself so that every
front end (the dry-run, the guard's stall dump, the plan tools) writes traces without importing
another front end. Reading plan files, with their located errors and `generate:` blocks, is
`commlint.plans.io`'s (which re-exports `dump_trace`)."""

from __future__ import annotations

import json
from pathlib import Path

from commlint.trace import Trace


def dump_trace(trace: Trace, path: str | Path | None = None) -> str:
    """The YAML form of a trace, one action per line (flow style)."""
    lines = [f"version: {trace.version}", f"world_size: {trace.world_size}"]
    if trace.backend:
        lines.append(f"backend: {trace.backend}")
    if trace.source:
        lines.append(f"source: {json.dumps(trace.source)}")
    if trace.groups:
        lines.append("groups:")
        for name, members in trace.groups.items():
            lines.append(f"  {json.dumps(name)}: {json.dumps(members)}")
    lines.append("ranks:")
    for rank in sorted(trace.ranks):
        actions = trace.ranks[rank]
        if not actions:
            lines.append(f"  {rank}: []")
            continue
        lines.append(f"  {rank}:")
        for a in actions:
            d = a.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
            d = {"op": a.op, **{k: v for k, v in d.items() if k != "op"}}
            lines.append("    - " + json.dumps(d, separators=(", ", ": ")))
    if trace.ends:
        lines.append("ends:")
        for rank, end in sorted(trace.ends.items()):
            lines.append(f"  {rank}: {json.dumps(end.model_dump(exclude_none=True))}")
    if trace.meta:
        lines.append("meta: " + json.dumps(trace.meta, default=str))
    text = "\n".join(lines) + "\n"
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text
