"""CL109: every side of a rank branch (or every rank) blocking-sends before it receives."""

from commlint.lint.analyze import RawFinding, Tok, cond_related, leaf_tok
from commlint.lint.ir import Branch, Comm
from commlint.rules import Rule


def _p2p_seq(program, toks) -> list[Tok]:
    out = []
    for t in toks:
        if t.cat == "p2p":
            out.append(t)
        elif t.cat == "loop":
            out.extend(_p2p_seq(program, t.kids[0]))
    return out


def _msg_fix(first: Tok, recv: Tok) -> tuple[str, str]:
    s, r = leaf_tok(first), leaf_tok(recv)
    msg = (
        f"every side blocks in {s.op} at {s.describe()} before it reaches {r.op} at "
        f"{r.describe()}: a blocking send waits until the peer posts its receive (gloo always; "
        "NCCL and MPI for all but small messages), and the peer is itself blocked in its own "
        "send — a send/send deadlock"
    )
    fix = (
        "Order the pair by rank (even ranks send then receive, odd ranks receive then send), "
        "or use `isend`/`irecv` (or `batch_isend_irecv`) and wait on both handles."
    )
    return msg, fix


def check(program):
    if not program.has_p2p():
        return []
    out = []
    for fn in program.all_functions():
        for node, conds, _cont in program.walk(fn):
            if isinstance(node, Branch):
                cond = program.effective(node.cond)
                if cond is None or not cond.dims:
                    continue
                seqs = [_p2p_seq(program, program.tokens(a, fn)) for a in node.arms]
                sending = [s for s in seqs if s and s[0].p2p == "send" and s[0].blocking]
                with_recv = [s for s in sending if any(t.p2p == "recv" for t in s[1:])]
                if len(sending) >= 2 and with_recv and len(sending) == len([s for s in seqs if s]):
                    recv = next(t for t in with_recv[0][1:] if t.p2p == "recv")
                    msg, fix = _msg_fix(sending[0][0], recv)
                    out.append(
                        RawFinding(
                            "CL109", msg, fn.path, sending[0][0].pos, fix, [cond_related(fn, cond)]
                        )
                    )
            elif isinstance(node, Comm) and node.kind == "send" and node.blocking:
                if any(c is not None and c.dims for c in conds) or not node.peer_dims:
                    continue
                # straight-line: this send is followed in the same block by a blocking recv
                rest = program.tokens(_cont[0][1], fn) if _cont else []
                rest = _p2p_seq(program, rest)
                if rest and rest[0].p2p == "recv" and rest[0].blocking:
                    send_tok = program.comm_tok(node, fn.path)
                    msg, fix = _msg_fix(send_tok, rest[0])
                    out.append(
                        RawFinding(
                            "CL109",
                            msg
                            + " (every rank runs this code, with a peer computed from its rank)",
                            fn.path,
                            node.pos,
                            fix,
                            [
                                (
                                    fn.path,
                                    node.root.pos if node.root else node.pos,
                                    "the peer is computed from the rank, so every rank sends first",
                                )
                            ],
                        )
                    )
    return out


RULE = Rule(
    code="CL109",
    name="send-send-cycle",
    summary="Both sides of an exchange call a blocking send before their receive.",
    explanation="""
A blocking `send` returns only when the peer has posted the matching `recv` (gloo does this at
every message size; NCCL and MPI do once messages exceed their small eager buffers). If both
ranks of an exchange send first — the two arms of `if rank == 0: ... else: ...` both starting
with `dist.send`, or every rank running `send(dst=peer); recv(src=peer)` with a peer computed
from its rank, as in a ring — each waits in its send for the other's receive: a deadlock (dl2,
Fig. 1). It may pass tests with tiny tensors and hang in production.
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Break the symmetry (even ranks send first, odd ranks receive first), or post non-blocking
`isend`/`irecv` (or `batch_isend_irecv`) and wait on both.
""",
    invalid=(
        """
import torch.distributed as dist

def swap(a, b, rank):
    if rank == 0:
        dist.send(a, dst=1)
        dist.recv(b, src=1)
    else:
        dist.send(a, dst=0)
        dist.recv(b, src=0)
""",
        """
import torch.distributed as dist

def ring_step(a, b):
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.send(a, dst=(rank + 1) % world)
    dist.recv(b, src=(rank - 1) % world)
""",
    ),
    valid=(
        """
import torch.distributed as dist

def swap(a, b, rank):
    if rank == 0:
        dist.send(a, dst=1)
        dist.recv(b, src=1)
    else:
        dist.recv(b, src=0)
        dist.send(a, dst=0)
""",
        """
import torch.distributed as dist

def ring_step(a, b):
    rank, world = dist.get_rank(), dist.get_world_size()
    reqs = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, a, (rank + 1) % world),
        dist.P2POp(dist.irecv, b, (rank - 1) % world),
    ])
    for req in reqs:
        req.wait()
""",
    ),
)
