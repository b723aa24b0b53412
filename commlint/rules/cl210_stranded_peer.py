from commlint.rules import Rule

RULE = Rule(
    code="CL210",
    name="stranded-peer",
    summary="Peers wait forever for a rank that raised or exited.",
    explanation="""
A rank stopped with an exception (or `sys.exit`) while its peers still expect communication
from it. Under NCCL the peers hang until the watchdog timeout; the error that caused it is
printed only on the failing rank, buried among the timeouts of all others. Common shapes: an
OOM caught in `except` on one rank and skipped (pytorch issue 44353), a data error on one
shard, a receiver aborted because it got more bytes than it posted.
""",
    severity="error",
    kind="trace",
    fix="""
Fix the error; and make failures collective: catch, then all-reduce an error flag so every
rank raises together, or abort the process group so peers fail fast.
""",
    invalid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, site: "train.py:60"}
  1: []
ends:
  1: {kind: exception, message: "RuntimeError: CUDA out of memory", site: "train.py:55"}
""",
    ),
    valid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, site: "train.py:60"}
  1:
    - {op: all_reduce, site: "train.py:60"}
""",
    ),
)
