"""CL107: a collective on a group that no rank reaching the call can belong to."""

from commlint.lint.analyze import RawFinding, short
from commlint.lint.ir import Comm, iter_nodes
from commlint.rules import Rule


def check(program):
    out = []
    for fn in program.all_functions():
        for n in iter_nodes(fn.body):
            if not isinstance(n, Comm) or n.members is None or n.rank_cond is None:
                continue
            if n.kind == "create":
                continue
            reach = None
            if n.rank_set is not None and not (n.rank_set & n.members):
                reach = f"only rank(s) {sorted(n.rank_set)} reach it"
            elif n.rank_excluded is not None and n.members <= n.rank_excluded:
                reach = f"rank(s) {sorted(n.rank_excluded)} never reach it"
            if reach is None:
                continue
            out.append(
                RawFinding(
                    code="CL107",
                    message=(
                        f"{n.text} at {short(fn.path)}:{n.pos.line} runs on group `{n.group}` "
                        f"(members {sorted(n.members)}), but {reach}: the callers are not "
                        "members (the call returns at once, doing nothing) and the members "
                        "never call it, so the group's next collective hangs or pairs with "
                        "the wrong call"
                    ),
                    path=fn.path,
                    pos=n.pos,
                    fix=(
                        f"Call it under a condition that holds on the members of `{n.group}` "
                        f"(e.g. `if rank in {sorted(n.members)}:`), or use the group this "
                        "rank belongs to."
                    ),
                    related=[
                        (
                            fn.path,
                            n.rank_cond.pos,
                            f"this condition selects the ranks that reach the call: "
                            f"{n.rank_cond.origin or n.rank_cond.text}",
                        )
                    ],
                )
            )
    return out


RULE = Rule(
    code="CL107",
    name="non-member-branch",
    summary="A collective on a group whose members can never reach the call (the branch "
    "selects other ranks).",
    explanation="""
A rank that is not a member of a group gets `GroupMember.NON_GROUP_MEMBER` from `new_group`,
and collectives called with it return at once without doing anything (pytorch issue 67600). So
`if rank == 0: dist.all_reduce(t, group=g)` with `g = new_group([1, 2])` does nothing on rank
0 — and the members 1 and 2 never call it: their next collective on `g` pairs with the wrong
call or hangs. The check uses literal group members (`new_group([..])`, `range(...)`) and
literal rank conditions (`rank == k`, `rank in (...)`, `rank < k`, `is_main_process`).
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Guard the call with the group's own membership (`if rank in ranks:`), or pass the group that
the selected ranks belong to.
""",
    invalid=(
        """
import torch.distributed as dist

workers = dist.new_group([1, 2, 3])

def report(t):
    if dist.get_rank() == 0:
        dist.all_reduce(t, group=workers)
""",
    ),
    valid=(
        """
import torch.distributed as dist

workers = dist.new_group([1, 2, 3])

def report(t):
    if dist.get_rank() in (1, 2, 3):
        dist.all_reduce(t, group=workers)
""",
    ),
)
