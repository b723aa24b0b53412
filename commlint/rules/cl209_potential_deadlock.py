from commlint.rules import Rule

RULE = Rule(
    code="CL209",
    name="potential-deadlock",
    summary="The recorded order completes, but another order a run can take deadlocks.",
    explanation="""
A trace is one interleaving. Some orders are decided at run time, not by the program:
ops issued from gradient hooks and DDP's fused bucket all-reduces go out when gradients
become ready (`bucket` in the trace), and ops of different threads interleave (`thread`).
Whether another order can hang depends on the queue model: under gloo only a blocking call
orders ops of different groups, under nccl any blocking call or device sync does, and under
single-queue (NCCL out of resources, DFCCL §2.3) every op does. commlint explores the legal
reorderings of each rank — within a window bounded by waits, syncs and blocking calls, never
reordering ops of one communicator (which would change what matches) — and reports an order
that closes a wait-for cycle. The finding names the ranks and the swapped ops, the cycle the
reordered trace deadlocks in, and the queue models under which it can happen; the witness is
checkable: reorder the trace that way and `commlint plan` reports CL201.

Severity is `warning`, not `error`: the recorded run completed, and whether the bad order
occurs depends on timing (and, for single-queue, on the device running out of resources). It
still exits 1, like every finding.
See docs/nondeterminism.md for the search and why its pruning never loses a deadlock.
""",
    severity="warning",
    kind="trace",
    fix="""
Take the timing out of the order: issue collectives on other groups after backward (after
DDP's buckets completed) rather than from gradient hooks, or from one thread, so every rank
issues them in the same order whatever the timing. The finding's witness shows which two ops
must not trade places.
""",
    invalid=(
        """
version: 1
world_size: 2
groups: {tp: [0, 1], dp: [0, 1]}
ranks:
  0:
    - {op: all_reduce, group: tp, bucket: 0, site: "hooks.py:10"}
    - {op: all_reduce, group: dp, bucket: 1, site: "hooks.py:20"}
  1:
    - {op: all_reduce, group: tp, bucket: 0, site: "hooks.py:10"}
    - {op: all_reduce, group: dp, bucket: 1, site: "hooks.py:20"}
""",
        """
version: 1
world_size: 2
groups: {dp: [0, 1], aux: [0, 1]}
ranks:
  0:
    - {op: all_reduce, group: dp, async: true, handle: b0, bucket: 0, label: "DDP bucket 0"}
    - {op: all_reduce, group: aux, async: true, handle: h, bucket: 1, site: "train.py:31"}
    - {op: all_reduce, group: dp, async: true, handle: b1, bucket: 1, label: "DDP bucket 1"}
    - {op: wait, handles: [b0, b1, h], site: "train.py:40"}
  1:
    - {op: all_reduce, group: dp, async: true, handle: b0, bucket: 0, label: "DDP bucket 0"}
    - {op: all_reduce, group: aux, async: true, handle: h, bucket: 1, site: "train.py:31"}
    - {op: all_reduce, group: dp, async: true, handle: b1, bucket: 1, label: "DDP bucket 1"}
    - {op: wait, handles: [b0, b1, h], site: "train.py:40"}
""",
    ),
    valid=(
        """
version: 1
world_size: 2
groups: {tp: [0, 1], dp: [0, 1]}
ranks:
  0:
    - {op: all_reduce, group: tp, site: "step.py:50"}
    - {op: all_reduce, group: dp, site: "step.py:51"}
  1:
    - {op: all_reduce, group: tp, site: "step.py:50"}
    - {op: all_reduce, group: dp, site: "step.py:51"}
""",
        """
version: 1
world_size: 2
groups: {dp: [0, 1], aux: [0, 1]}
ranks:
  0:
    - {op: all_reduce, group: dp, async: true, handle: b0, bucket: 0, label: "DDP bucket 0"}
    - {op: all_reduce, group: dp, async: true, handle: b1, bucket: 1, label: "DDP bucket 1"}
    - {op: wait, handles: [b0, b1], label: "end of backward"}
    - {op: all_reduce, group: aux, async: true, handle: h, site: "train.py:36"}
    - {op: wait, handles: [h], site: "train.py:40"}
  1:
    - {op: all_reduce, group: dp, async: true, handle: b0, bucket: 0, label: "DDP bucket 0"}
    - {op: all_reduce, group: dp, async: true, handle: b1, bucket: 1, label: "DDP bucket 1"}
    - {op: wait, handles: [b0, b1], label: "end of backward"}
    - {op: all_reduce, group: aux, async: true, handle: h, site: "train.py:36"}
    - {op: wait, handles: [h], site: "train.py:40"}
""",
    ),
)
