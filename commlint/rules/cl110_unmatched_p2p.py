"""CL110: a send (or receive) under a rank branch with no receive (or send) to match it."""

from commlint.lint.analyze import RawFinding, cond_related, leaf_tok
from commlint.lint.ir import Branch
from commlint.rules import Rule

OPPOSITE = {"send": "recv", "recv": "send"}
WHY = {"recv": "a blocking send waits for its receive", "send": "nothing is ever sent"}


def _p2p(toks):
    for t in toks:
        if t.cat == "p2p":
            yield t
        for arm in t.kids:
            yield from _p2p(arm)


def check(program):
    if not program.has_p2p():
        return []
    out = []
    for fn in program.all_functions():
        everything = list(_p2p(program.summary(fn)))
        kinds = {t.p2p for t in everything}
        # a message travels on one group's communicator: a send on `world` does not pair
        # with a receive on `local_group`, even between the same two ranks
        on_group = {(t.group, t.p2p) for t in everything}
        if "batch" in kinds:
            continue
        for node, _conds, _cont in program.walk(fn):
            if not isinstance(node, Branch):
                continue
            cond = program.effective(node.cond)
            if cond is None or not cond.dims:
                continue
            if cond.true_ranks is None and cond.false_ranks is None and cond.mod_test is None:
                continue  # only literal rank splits: helpers leave the peer side to callers
            for arm in node.arms:
                for t in _p2p(program.tokens(arm, fn)):
                    want = OPPOSITE.get(t.p2p or "")
                    if want is None or (t.group, want) in on_group:
                        continue
                    real = leaf_tok(t)
                    verb = "sends" if t.p2p == "send" else "receives"
                    gname = "WORLD" if t.group == "WORLD" else f"group `{t.group}`"
                    where = f" on {gname}" if want in kinds else ""
                    out.append(
                        RawFinding(
                            code="CL110",
                            message=(
                                f"{real.describe()} {verb}{where}, but no rank running "
                                f"`{fn.name}` ever calls a matching "
                                f"{'recv/irecv' if want == 'recv' else 'send/isend'}{where}: "
                                f"it blocks forever ({WHY[want]})"
                            ),
                            path=fn.path,
                            pos=t.pos,
                            fix=(
                                f"Add the matching {want} on the peer's side of the branch at "
                                f"line {cond.pos.line}, or remove this {real.op}."
                            ),
                            related=[cond_related(fn, cond)],
                        )
                    )
                    break
    return out


RULE = Rule(
    code="CL110",
    name="unmatched-p2p",
    summary="A send under a rank branch that no rank receives (or a receive nobody sends to).",
    explanation="""
Point-to-point messages need both sides: a `send` on one rank and a `recv` on its peer. When a
branch on a literal rank (`if rank == 0:`) sends but no other arm — and nothing else in the
function, callees included — ever receives, the sender blocks forever (a blocking send waits for
its receive under gloo, and for large messages under NCCL), and a lone `recv` waits forever for
data that is never sent. A message travels on one group's communicator, so the match must be
on the same group: a send on `world` does not pair with a receive on `local_group`, even
between the same two ranks. Functions that only send (pipeline helpers such as `send_forward`)
are not reported on their own: the check applies where the rank split is literal (`rank == 0`,
`rank in (0, 1)`, `rank % 2 == 0`).
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Give the peer its matching call in the other arm (`elif rank == 1: dist.recv(t, src=0)`), or
remove the stray send/receive.
""",
    invalid=(
        """
import torch.distributed as dist

def push_weights(t):
    if dist.get_rank() == 0:
        dist.send(t, dst=1)
""",
        """
import torch.distributed as dist

def push_weights(t, pair_group):
    if dist.get_rank() == 0:
        dist.send(t, dst=1)
    elif dist.get_rank() == 1:
        dist.recv(t, src=0, group=pair_group)
""",
    ),
    valid=(
        """
import torch.distributed as dist

def push_weights(t):
    if dist.get_rank() == 0:
        dist.send(t, dst=1)
    elif dist.get_rank() == 1:
        dist.recv(t, src=0)
""",
    ),
)
