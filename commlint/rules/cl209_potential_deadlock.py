from commlint.rules import Rule

RULE = Rule(
    code="CL209",
    name="potential-deadlock",
    summary="The recorded order completes, but another order a run can take deadlocks.",
    explanation="""
A trace is one interleaving. Some orders are decided at run time, not by the program:
ops issued from gradient hooks and DDP's fused bucket all-reduces go out when gradients
become ready (`bucket` in the trace); ops of different threads interleave (`thread`); and when
NCCL runs out of resources the device runs the async ops it holds one at a time, in an order
of its choosing (the `single-queue` model, DFCCL §2.3). commlint explores the legal
reorderings of each rank — within a window bounded by waits, syncs and blocking calls, never
reordering ops of one communicator (which would change what matches) — and reports an order
that closes a wait-for cycle. The finding names the ranks and the swapped ops, the cycle the
reordered trace deadlocks in, and the queue models under which it can happen; the witness is
checkable: reorder the trace that way and `commlint plan` reports CL201.

Severity is `warning`, not `error`: the recorded run completed, and whether the bad order
occurs depends on timing (and, for single-queue, on the device running out of resources). It
still exits 1, like every finding; a plan gate that must reject it can `--select CL209`.
See docs/nondeterminism.md for the search and why its pruning never loses a deadlock.
""",
    severity="warning",
    kind="trace",
    fix="""
Take the timing out of the order: issue collectives on other groups after backward (not from
gradient hooks), from one thread, or wait on each async op before issuing one on another
group, so every rank runs them in the same order whatever the timing.
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
groups: {tp: [0, 1], dp: [0, 1]}
ranks:
  0:
    - {op: all_reduce, group: tp, async: true, handle: a, site: "step.py:40"}
    - {op: all_reduce, group: dp, async: true, handle: b, site: "step.py:41"}
    - {op: wait, handles: [a, b], site: "step.py:42"}
  1:
    - {op: all_reduce, group: tp, async: true, handle: a, site: "step.py:40"}
    - {op: all_reduce, group: dp, async: true, handle: b, site: "step.py:41"}
    - {op: wait, handles: [a, b], site: "step.py:42"}
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
groups: {tp: [0, 1], dp: [0, 1]}
ranks:
  0:
    - {op: all_reduce, group: tp, async: true, handle: a, site: "step.py:40"}
    - {op: wait, handles: [a], site: "step.py:41"}
    - {op: all_reduce, group: dp, async: true, handle: b, site: "step.py:42"}
    - {op: wait, handles: [b], site: "step.py:43"}
  1:
    - {op: all_reduce, group: tp, async: true, handle: a, site: "step.py:40"}
    - {op: wait, handles: [a], site: "step.py:41"}
    - {op: all_reduce, group: dp, async: true, handle: b, site: "step.py:42"}
    - {op: wait, handles: [b], site: "step.py:43"}
""",
    ),
)
