"""CL111: the handle of an async communication call is dropped without `wait()`."""

from commlint.lint.analyze import RawFinding, short
from commlint.rules import Rule


def check(program):
    out = []
    for f in program.files:
        for a in f.async_facts:
            how = (
                "its handle is discarded"
                if a.status == "discarded"
                else "its handle is assigned but never used"
            )
            out.append(
                RawFinding(
                    code="CL111",
                    message=(
                        f"{a.text} at {short(f.path)}:{a.pos.line} is asynchronous and {how}: "
                        "nothing waits for it, so the buffer may be read or reused before the "
                        "transfer completes, and an error or hang in it goes unnoticed until a "
                        "later call blocks"
                    ),
                    path=f.path,
                    pos=a.pos,
                    fix=(
                        "Keep the handle and call `.wait()` on it before using the tensor (or "
                        "call the blocking form, without async_op=True)."
                    ),
                )
            )
    return out


RULE = Rule(
    code="CL111",
    name="unwaited-async",
    summary="An async collective or isend/irecv whose handle is never waited.",
    explanation="""
`isend`, `irecv`, `batch_isend_irecv` and any collective with `async_op=True` return a work
handle; the operation is complete only after `handle.wait()`. Dropping the handle (an
expression statement, or a variable never used again) means the tensor can be read before the
data arrived, or overwritten while it is still being sent; under NCCL the operation stays
queued on the communicator and orders later collectives behind it.
""",
    severity="warning",
    kind="source",
    check=check,
    fix="Keep the handle and `wait()` it before the tensor is used.",
    invalid=(
        """
import torch.distributed as dist

def prefetch(t, peer):
    dist.irecv(t, src=peer)
    return t
""",
        """
import torch.distributed as dist

def reduce(t):
    work = dist.all_reduce(t, async_op=True)
    return t * 2
""",
    ),
    valid=(
        """
import torch.distributed as dist

def prefetch(t, peer):
    req = dist.irecv(t, src=peer)
    req.wait()
    return t
""",
    ),
)
