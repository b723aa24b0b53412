from commlint.rules import Rule

RULE = Rule(
    code="CL203",
    name="collective-mismatch",
    summary="The ranks' i-th collective on a group differs in op, root or reduce op.",
    explanation="""
Collectives match by position: the i-th collective a rank issues on a group meets the i-th
collective of every other member (the sequence number Flight Recorder shows). If the members
disagree on the operation (all_reduce against barrier) or on the root of a broadcast/reduce,
they never meet: NCCL hangs without an error, gloo times out on every rank. A different
reduce op (sum on one rank, max on another) completes with a meaningless result.

Under the `nccl` model a barrier is a one-element all_reduce and pairs silently with one; the
checker then reports nothing for that pair, as NCCL would not either. When the sequences,
drifted apart there, fail later (a rank-0-only `all_reduce` of one element meets the other
ranks' end-of-step barrier, and the hang shows two collectives further), the finding is
located at that first pairing and says so: "The ranks' calls on this group first differ at
collective #32: all_reduce(WORLD) on rank 0 @train.py:19; barrier(WORLD) on rank 1 — NCCL
pairs a barrier with a one-element all_reduce silently, so the sequences drift apart there
and fail here."
""",
    severity="error",
    kind="trace",
    fix="""
Give every member the same sequence of collectives; look for a collective added or skipped
under a rank condition just before the mismatching one, and for a root computed per rank.
""",
    invalid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, shape: [16], site: "train.py:41"}
    - {op: barrier, site: "train.py:57"}
  1:
    - {op: barrier, site: "train.py:57"}
    - {op: all_reduce, shape: [16], site: "train.py:41"}
""",
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: broadcast, root: 0, site: "init.py:12"}
  1:
    - {op: broadcast, root: 1, site: "init.py:12"}
""",
    ),
    valid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, shape: [16], site: "train.py:41"}
    - {op: barrier, site: "train.py:57"}
  1:
    - {op: all_reduce, shape: [16], site: "train.py:41"}
    - {op: barrier, site: "train.py:57"}
""",
    ),
)
