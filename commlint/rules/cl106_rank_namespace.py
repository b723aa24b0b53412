"""CL106: a root/peer rank in the wrong namespace (global vs group) or outside the group."""

from commlint.lint.analyze import RawFinding, short
from commlint.lint.ir import Comm, iter_nodes
from commlint.rules import Rule

GLOBAL = "global"
ONE_OF_MANY = ("mesh:", "megatron.")


def _finding(fn, n: Comm, msg: str, fix: str) -> RawFinding:
    return RawFinding(
        code="CL106",
        message=msg,
        path=fn.path,
        pos=n.root.pos,
        fix=fix,
        related=[(fn.path, n.pos, f"the {n.op} call")],
    )


def check(program):
    out = []
    for fn in program.all_functions():
        for n in iter_nodes(fn.body):
            if not isinstance(n, Comm) or n.root is None:
                continue
            r = n.root
            where = f"{n.text} at {short(fn.path)}:{n.pos.line}"
            sub = n.group != "WORLD"
            if r.group_param:
                # a parameter named `rank` holds what the caller passes: its name does not say
                # which namespace the number is in (`group_src=rank` with rank = pg.rank())
                if GLOBAL in r.dims and r.text not in fn.params:
                    out.append(
                        _finding(
                            fn,
                            n,
                            f"{r.param}={r.text} in {where} is a global rank, but {r.param} is a "
                            f"rank within the group: on most ranks it names the wrong member or "
                            "one outside the group, and the call fails or waits for the wrong peer",
                            f"Pass the rank within the group (`dist.get_group_rank(group, r)`), or "
                            f"use `{r.param[6:]}=` for a global rank.",
                        )
                    )
                elif r.literal is not None and n.group_size and r.literal >= n.group_size:
                    out.append(
                        _finding(
                            fn,
                            n,
                            f"{r.param}={r.literal} in {where}, but group `{n.group}` has only "
                            f"{n.group_size} members (ranks 0..{n.group_size - 1} within it)",
                            f"Use a rank within the group (0..{n.group_size - 1}).",
                        )
                    )
                continue
            if sub and r.group_rank_of is not None and not r.exact:
                out.append(
                    _finding(
                        fn,
                        n,
                        f"{r.param}={r.text} in {where} is a rank within a group, but "
                        f"`{r.param}` takes a global rank: every group except the one containing "
                        "that global rank names a root/peer that is not a member (ValueError), "
                        "or the wrong one",
                        f"Pass `group_{r.param}={r.text}` (a rank within the group), or convert "
                        f"with `dist.get_global_rank(group, {r.text})`.",
                    )
                )
            elif sub and r.literal is not None and n.members is not None:
                if r.literal not in n.members:
                    out.append(
                        _finding(
                            fn,
                            n,
                            f"{r.param}={r.literal} in {where} is a global rank outside group "
                            f"`{n.group}` (members {sorted(n.members)}): the call fails on every "
                            "member with ValueError, or waits for a rank that never joins",
                            f"Use a member of the group as {r.param} "
                            f"(e.g. {min(n.members)}), or pass `group_{r.param}=` with a rank "
                            "within the group.",
                        )
                    )
            elif sub and r.literal is not None and n.group.startswith(ONE_OF_MANY):
                out.append(
                    _finding(
                        fn,
                        n,
                        f"{r.param}={r.literal} in {where} is a global rank, but `{n.group}` "
                        "is one of several groups of that kind: only the group containing "
                        f"global rank {r.literal} has it as a member, every other group fails "
                        "or hangs",
                        f"Use `group_{r.param}={r.literal}` (the group's own rank {r.literal}), or "
                        f"`dist.get_global_rank(group, {r.literal})`.",
                    )
                )
            elif r.exact and GLOBAL in r.dims and not n.in_branch:
                if n.kind in ("send", "recv"):
                    msg = (
                        f"{r.param}={r.text} in {where} is this rank's own rank: every rank "
                        f"addresses itself, so no {n.op} is ever matched"
                    )
                else:
                    msg = (
                        f"{r.param}={r.text} in {where} is this rank's own rank, so every "
                        f"rank names a different root for the same {n.op}: the calls do not "
                        "match and the job hangs"
                    )
                out.append(
                    _finding(
                        fn,
                        n,
                        msg,
                        f"Use the same {r.param} on every rank (a literal such as 0, or a value "
                        "every rank computes the same way).",
                    )
                )
    return out


RULE = Rule(
    code="CL106",
    name="root-rank-namespace",
    summary="The root/peer of a call is in the wrong rank namespace, outside the group, or the "
    "caller's own rank.",
    explanation="""
`src=` / `dst=` of `broadcast`, `reduce`, `gather`, `scatter`, `send`, `recv` (and the object
variants) take a **global** rank, even on a subgroup; `group_src=` / `group_dst=` take the rank
**within** the group. Mixing them up is a common cause of "wrong root" hangs: passing
`dist.get_rank(group)` or `mesh.get_local_rank()` as `src=`, passing `dist.get_rank()` as
`group_src=`, a literal global rank that is not a member of the group (only the first of the
tensor-parallel groups contains global rank 0), or every rank passing its own rank as the
root of one collective.
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Use `group_src=`/`group_dst=` with ranks within the group, or convert with
`dist.get_global_rank(group, group_rank)`; make the root the same on every rank.
""",
    invalid=(
        """
import torch.distributed as dist

def sync_from_leader(t, group):
    leader = dist.get_rank(group)
    dist.broadcast(t, src=leader, group=group)
""",
        """
import torch.distributed as dist

pair = dist.new_group([2, 3])

def share(t):
    dist.broadcast(t, src=0, group=pair)
""",
    ),
    valid=(
        """
import torch.distributed as dist

def sync_from_leader(t, group):
    dist.broadcast(t, group_src=0, group=group)
""",
        """
import torch.distributed as dist

pair = dist.new_group([2, 3])

def share(t):
    dist.broadcast(t, src=2, group=pair)
""",
    ),
)
