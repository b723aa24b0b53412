"""CL118: collectives issued in the iteration order of a set of strings."""

from commlint.lint.analyze import RawFinding, leaf_tok
from commlint.lint.ir import Loop
from commlint.rules import Rule


def check(program):
    from commlint.lint.perrank_check import perrank_findings  # loads the checker: only when run

    found = perrank_findings(program, "CL118")
    seen = {(f.path, f.pos.line) for f in found}
    # any function, entry point or not (a helper `sync(stats)` whose callers are elsewhere):
    # a loop over a set constructor whose body issues collectives
    for fn in program.all_functions():
        for node, _conds, _cont in program.walk(fn):
            if not isinstance(node, Loop) or node.unordered is None:
                continue
            toks = program.collectives(node.body, fn)
            if not toks or (fn.path, node.pos.line) in seen:
                continue
            seen.add((fn.path, node.pos.line))
            real = leaf_tok(toks[0])
            found.append(
                RawFinding(
                    code="CL118",
                    message=(
                        f"the loop at line {node.pos.line} iterates `{node.unordered}`, a set, "
                        f"and issues {real.op} at {real.describe()} in its body: a set of "
                        "strings is visited in a different order in every process (string "
                        "hashing is randomised per process, PYTHONHASHSEED), so the ranks' "
                        "collectives pair different items (wrong results, or a hang when their "
                        "sizes differ)"
                    ),
                    path=fn.path,
                    pos=node.pos,
                    fix="Iterate in one order on every rank: `for name in sorted(names):`.",
                )
            )
    return found


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
