"""CL102: a collective under a branch whose condition depends on per-rank data."""

from commlint.lint.perrank_check import branch_findings
from commlint.rules import Rule


def check(program):
    from commlint.lint.perrank_check import perrank_findings

    # the per-rank evaluation sees a rank-local value's test through objects and helpers the
    # taint rules do not follow; one finding per cause (the taint one, when both see it)
    found = [f for f in branch_findings(program) if f.code == "CL102"]
    return found + perrank_findings(program, "CL102")


RULE = Rule(
    code="CL102",
    name="data-dependent-collective",
    summary="A collective is called under a condition computed from this rank's own data.",
    explanation="""
Values computed from a rank's own data differ between ranks: a loss read with `.item()`,
`torch.isnan(x).any()`, a tensor comparison, the time (`time.time()`), the length of a
per-rank shard, or whether an iterator is exhausted. Reading a tensor the linter knows to hold
this rank's values — drawn with `torch.rand`/`randn`/... or built from a rank's value with
`torch.tensor(...)`, and what is computed from it — is the same read whatever its spelling:
`float(t)`, `int(t)`, `bool(t)`, `t.item()`, `t.tolist()`, or `if t > 0.5:` itself.

A branch on such a value that calls a collective on one side only (or a loop whose trip count
depends on it) makes some ranks call the collective and others not, and the job hangs the first
time the values disagree — which may be hours into a run. The same holds for a `send` or `recv`
under such a condition: the peer's matching call does not follow this rank's data.

A value that came out of a collective (`all_reduce`d, `broadcast`, gathered, or returned by a
functional collective) is the same on every member and is not reported.
""",
    severity="warning",
    kind="source",
    check=check,
    fix="""
Agree on the decision first: reduce the flag across ranks (`dist.all_reduce(flag,
op=ReduceOp.MAX)`) or broadcast it from one rank, then branch on the agreed value.
""",
    invalid=(
        """
import torch.distributed as dist

def step(loss, grads):
    if loss.item() > 10.0:
        dist.all_reduce(grads)
""",
        """
import torch
import torch.distributed as dist

def maybe_log(stats):
    if float(torch.rand(1)) < 0.1:
        dist.all_reduce(stats)
""",
    ),
    valid=(
        """
import torch
import torch.distributed as dist

def step(loss, grads):
    flag = torch.tensor(float(loss.item() > 10.0))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() > 0:
        dist.all_reduce(grads)
""",
    ),
)
