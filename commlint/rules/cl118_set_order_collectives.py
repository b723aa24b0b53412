"""CL118: collectives issued in the iteration order of a set of strings."""

from commlint.rules import Rule


def check(program):
    from commlint.lint.perrank_check import perrank_findings  # loads the checker: only when run

    return perrank_findings(program, "CL118")


RULE = Rule(
    code="CL118",
    name="set-order-collectives",
    summary=(
        "Collectives are issued while iterating a set of strings, whose order differs "
        "between ranks."
    ),
    explanation="""
Python randomises string hashing per process (`PYTHONHASHSEED`), so iterating a `set` (or
`frozenset`) of strings visits the items in a different order on each rank. Collectives issued
in that loop pair different items across ranks: wrong results, or a hang when the tensors'
sizes differ.
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Iterate in one order on every rank: `for name in sorted(names):`.
""",
    invalid=(
        """
import torch
import torch.distributed as dist


def main():
    stats = {"loss": torch.zeros(1), "acc": torch.zeros(3), "tokens": torch.zeros(2)}
    for name in set(stats):  # expect: CL118
        dist.all_reduce(stats[name])
""",
    ),
    valid=(
        """
import torch
import torch.distributed as dist


def main():
    stats = {"loss": torch.zeros(1), "acc": torch.zeros(3), "tokens": torch.zeros(2)}
    for name in sorted(set(stats)):
        dist.all_reduce(stats[name])
""",
    ),
)
