"""Hand-made findings covering every shape a format must handle (shared by the tests)."""

from __future__ import annotations

import io

from commlint.findings import CycleEdge, Finding, InputError, Location, Report
from commlint.report import write_report

TRAIN = """\
import torch.distributed as dist


def step(model, loss):
    rank = dist.get_rank()
    if rank == 0:
        log(loss)
        dist.all_reduce(loss)
    return loss
"""

HELPERS = """\
def is_main():
    return dist.get_rank() == 0
"""


def conditional_finding(path: str = "train.py") -> Finding:
    return Finding(
        code="CL101",
        name="conditional-collective",
        severity="error",
        message="all_reduce runs only on rank 0; ranks 1.. never call it, rank 0 waits forever.",
        path=path,
        line=8,
        col=9,
        end_line=8,
        end_col=30,
        related=[
            Location(path=path, line=6, col=8, end_line=6, end_col=17, message="depends on rank"),
            Location(path="helpers.py", line=2, col=12, message="rank helper defined here"),
        ],
        fix="Move the all_reduce out of the `if rank == 0:` branch.",
    )


def cycle_finding() -> Finding:
    """A pure trace finding: no file, no line, only ranks and a cycle."""
    return Finding(
        code="CL201",
        name="deadlock-cycle",
        severity="error",
        message="rank 0 waits in send(→1) for rank 1, which waits in send(→0) for rank 0.",
        ranks=[0, 1],
        cycle=[
            CycleEdge(rank=0, action=0, op="send(→1)", site="train.py:8", waits_for=1),
            CycleEdge(rank=1, action=0, op="send(→0)", site="train.py:13", waits_for=0),
        ],
        actions=[Location(rank=0, action=0, site="train.py:8")],
        fix="Order the sends by parity.",
        models=["gloo"],
    )


def pathonly_finding() -> Finding:
    return Finding(
        code="CL206",
        name="unwaited-handle",
        severity="warning",
        message="The handle of isend is never waited: 50% of runs, a, b: lost.\nSecond line.\r",
        path="plans/odd, name:1.yaml",
        ranks=[3],
    )


def make_report(*findings: Finding, errors: list[InputError] | None = None) -> Report:
    return Report(findings=list(findings), errors=errors or [], checked=len(findings))


def render(report: Report, fmt: str) -> str:
    stream = io.StringIO()
    write_report(report, fmt, stream)
    return stream.getvalue()
