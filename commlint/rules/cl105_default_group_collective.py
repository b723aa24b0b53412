"""CL105: a collective on the default group in code that creates subgroups."""

from commlint.lint.analyze import RawFinding, short
from commlint.lint.ir import Comm, iter_nodes
from commlint.rules import Rule

# a barrier, and a distributed checkpoint (every rank of the job writes its part), are
# meant for the whole job
EXEMPT = frozenset({"barrier", "all_gather_object (checkpoint planning)"})


def check(program):
    from commlint.lint.perrank_check import called_outside_subgroups

    required = bool(program.options.get("explicit_group_required"))
    out = []
    for f in program.files:
        if not (f.creates_subgroups or required):
            continue
        for fn in f.functions.values():
            for n in iter_nodes(fn.body):
                if not isinstance(n, Comm) or not n.default_group or not n.torch_api:
                    continue
                if n.kind != "collective" or n.op in EXEMPT:
                    continue
                if f.creates_subgroups and called_outside_subgroups(program, f.path, n.pos.line):
                    continue  # a rank in no subgroup calls it: it is meant for every rank
                why = (
                    "this file creates process groups"
                    if f.creates_subgroups
                    else "`explicit-group-required` is set"
                )
                out.append(
                    RawFinding(
                        code="CL105",
                        message=(
                            f"{n.text} at {short(f.path)}:{n.pos.line} has no `group=` and runs "
                            f"on WORLD, but {why}: if this was meant for a subgroup (tensor-, "
                            "data- or pipeline-parallel), every rank joins it, the result mixes "
                            "groups, and the subgroups' collectives get out of order"
                        ),
                        path=f.path,
                        pos=n.pos,
                        fix=(
                            "Pass the group explicitly: `group=<subgroup>`, or "
                            "`group=dist.group.WORLD` if every rank is meant to take part."
                        ),
                    )
                )
    return out


RULE = Rule(
    code="CL105",
    name="default-group-collective",
    summary="A collective without `group=` (so on WORLD) in code that creates subgroups.",
    explanation="""
In code that builds tensor-, data- or pipeline-parallel groups, a collective without `group=`
silently runs on the default group (WORLD). That is almost always a forgotten argument: the
reduction mixes ranks that hold different shards, and because every rank now has one more
collective on WORLD than its subgroup peers expect, later collectives pair up with the wrong
calls. A group created over every rank (`new_group(backend="gloo")`, no `ranks`) is not a
subgroup. `barrier()` is exempt, and so is a collective that the per-rank evaluation sees called
by a rank that belongs to none of the subgroups (only some ranks evaluate on their own group,
every rank all-reduces gradients): it is meant for every rank. Set
`explicit-group-required = true` in `[tool.commlint]` to require an explicit group everywhere.
""",
    severity="warning",
    kind="source",
    check=check,
    fix="""
Pass `group=` explicitly; write `group=dist.group.WORLD` when every rank is meant to take part.
""",
    invalid=(
        """
import torch.distributed as dist

tp_group = dist.new_group([0, 1])

def reduce_activations(x):
    dist.all_reduce(x)
    return x
""",
    ),
    valid=(
        """
import torch.distributed as dist

tp_group = dist.new_group([0, 1])

def reduce_activations(x):
    dist.all_reduce(x, group=tp_group)
    return x
""",
        """
import torch.distributed as dist

# a second group over every rank (checkpoint traffic on gloo) is not a subgroup
ckpt_group = dist.new_group(backend="gloo")

def average_gradients(params):
    for p in params:
        dist.all_reduce(p.grad)
""",
    ),
)
