"""Each queue model's verdict on a trace, and why: the lines `python -m
commlint.commands.reorder PLAN` prints (recorded order, every legal reordering, the reason)."""

from __future__ import annotations

from commlint.graph.check import check_trace
from commlint.graph.reorder import CODE, MODEL_REASONS
from commlint.trace import Trace


def explain_models(
    trace: Trace, models: tuple[str, ...] = ("gloo", "nccl", "single-queue")
) -> list[str]:
    """One line per model: recorded-order verdict, reordering verdict, and why."""
    res = check_trace(trace, list(models), reorder=True)
    lines = []
    for m in models:
        base = [f for f in res.findings if f.code != CODE and m in (f.models or [])]
        pot = [f for f in res.findings if f.code == CODE and m in (f.models or [])]
        if any(f.severity == "error" for f in base):
            verdict = "hangs in the recorded order"
        elif pot:
            verdict = "potential deadlock under reordering"
        else:
            verdict = "safe, also under every legal reordering"
        lines.append(f"{m:13s} {verdict}: {MODEL_REASONS[m]}")
    return lines
