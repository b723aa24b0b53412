"""CL112: communication issued from a thread or an executor."""

from commlint.lint.analyze import RawFinding, leaf_tok
from commlint.lint.ir import CallSite, Comm, Spawn
from commlint.rules import Rule


def check(program):
    out = []
    for fn in program.all_functions():
        for node, _conds, _cont in program.walk(fn):
            if not isinstance(node, Spawn):
                continue
            what = None
            if isinstance(node.target, Comm):
                what = f"{node.target.text}"
            elif isinstance(node.target, CallSite):
                callee = program.resolve(node.target)
                if callee is not None:
                    toks = program.summary(callee)
                    if toks:
                        real = leaf_tok(toks[0])
                        what = f"`{node.target.text}`, which calls {real.describe()}"
            if what is None:
                continue
            out.append(
                RawFinding(
                    code="CL112",
                    message=(
                        f"{what} runs on {node.how}: its collectives are issued in an order "
                        "that depends on thread scheduling, so ranks can interleave them "
                        "differently with the main thread's collectives on the same group — "
                        "a mismatch that hangs"
                    ),
                    path=fn.path,
                    pos=node.pos,
                    fix=(
                        "Communicate from one thread only, or give the background work its own "
                        "process group (`dist.new_group(...)` created on every rank) and join "
                        "the thread before the main thread communicates on it."
                    ),
                )
            )
    return out


RULE = Rule(
    code="CL112",
    name="collective-in-thread",
    summary="A collective is issued from a thread or executor.",
    explanation="""
Collectives on one process group must be issued in the same order on every rank. A collective
called from a `threading.Thread` or an executor (`ThreadPoolExecutor.submit`) races with the
main thread: on one rank the background all-gather goes first, on another the main thread's
all-reduce does, and the two pair up with each other — a mismatch that hangs or corrupts data.
Background checkpointing is the usual case; it is safe only on a dedicated group that nothing
else uses concurrently.
""",
    severity="warning",
    kind="source",
    check=check,
    fix="""
Issue communication from the main thread, or use a dedicated process group for the background
work.
""",
    invalid=(
        """
import threading
import torch.distributed as dist

def _gather_and_save(state):
    dist.all_gather_object([None] * dist.get_world_size(), state)

def save_async(state):
    threading.Thread(target=_gather_and_save, args=(state,)).start()
""",
    ),
    valid=(
        """
import threading
import torch
import torch.distributed as dist

def _save(state):
    torch.save(state, "ckpt.pt")

def save_async(state):
    objs = [None] * dist.get_world_size()
    dist.all_gather_object(objs, state)
    threading.Thread(target=_save, args=(objs,)).start()
""",
    ),
)
