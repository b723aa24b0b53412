"""CL108: a process group or device mesh created by only some ranks, or in a rank-dependent
order."""

from commlint.lint.perrank_check import branch_findings
from commlint.rules import Rule


def check(program):
    return [f for f in branch_findings(program) if f.code == "CL108"]


RULE = Rule(
    code="CL108",
    name="conditional-group-creation",
    summary="`new_group` / `init_device_mesh` runs on only some ranks, or in a rank-dependent "
    "order.",
    explanation="""
`new_group`, `new_subgroups`, `init_device_mesh` and `DeviceMesh(...)` are collectives over
the parent group: every rank must call them for every group — including the groups it is not a
member of — in the same order. The classic bug is `if rank in ranks: g = new_group(ranks)`:
the ranks outside skip the call, the next `new_group` disagrees on the group's name, and the
job hangs in the store (or much later, in the first collective on the group). Pass
`use_local_synchronization=True` if only members are meant to call it.

An arm that raises (`else: raise RuntimeError(f"unknown rank {rank}")` after a dispatch of
roles by rank) is not compared with the other arms past the calls it makes before raising: that
rank crashes with a traceback and the launcher stops the job; the roles' arms are still
compared with each other (`tests/lint/patterns/role_dispatch_raise.py` is clean,
`role_dispatch_missing_group.py`, whose trainers skip a group the other roles create, is not).
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Create every group on every rank, in the same order, and keep the one this rank belongs to:
`for ranks in layout: g = new_group(ranks); if rank in ranks: mine = g`.
""",
    invalid=(
        """
import torch.distributed as dist

def build_tp_groups(rank, tp):
    for start in range(0, dist.get_world_size(), tp):
        ranks = list(range(start, start + tp))
        if rank in ranks:
            group = dist.new_group(ranks)
    return group
""",
    ),
    valid=(
        """
import torch.distributed as dist

def build_tp_groups(rank, tp):
    for start in range(0, dist.get_world_size(), tp):
        ranks = list(range(start, start + tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            group = g
    return group
""",
    ),
)
