"""CL117: `new_group(ranks)` with a list that depends on the rank."""

from commlint.rules import Rule


def check(program):
    from commlint.lint.perrank_check import perrank_findings  # loads the checker: only when run

    return perrank_findings(program, "CL117")


RULE = Rule(
    code="CL117",
    name="rank-dependent-group-members",
    summary=("`new_group` is called with a member list that differs between ranks."),
    explanation="""
`dist.new_group(ranks)` is a collective over the whole world (unless
`use_local_synchronization=True`): every rank must call it, in the same order, with the same
list. A list computed from the rank (`[rank // 2 * 2, rank // 2 * 2 + 1]`) makes ranks 0 and 1
create one group while ranks 2 and 3 create another under the same name: the creation hangs or
the groups' stores collide. Evaluated rank by rank, the linter compares each rank's list.
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Create every group on every rank in a loop over all of them and keep the one this rank belongs
to: `for start in range(0, world, 2): g = dist.new_group([start, start + 1])`, then
`if rank // 2 * 2 == start: pair = g`.
""",
    invalid=(
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    start = rank // 2 * 2
    pair = dist.new_group(ranks=[start, start + 1])  # expect: CL117
    dist.all_reduce(torch.zeros(4), group=pair)
""",
    ),
    valid=(
        """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    pair = None
    for start in range(0, world, 2):
        g = dist.new_group(ranks=[start, start + 1])
        if rank // 2 * 2 == start:
            pair = g
    dist.all_reduce(torch.zeros(4), group=pair)
""",
    ),
)
