from commlint.rules import Rule

RULE = Rule(
    code="CL202",
    name="orphaned-wait",
    summary="A rank waits for a peer that finished (or left the loop) without answering.",
    explanation="""
A rank is blocked in a call whose counterpart would come from a rank that has already run to
the end of its communication — it left a loop early, skipped the call under a condition, or
issues no communication at all. There is no cycle, but nobody will ever answer: the waiting
rank hangs until the timeout (under gloo, if the early rank exits, its peers fail at once with
"Connection closed by peer" instead). This is the classic "one rank stopped early" hang, e.g.
early stopping decided from a rank-local metric (transformers issue 17478).
""",
    severity="error",
    kind="trace",
    fix="""
Make every rank run the same number of iterations and reach the same calls: derive loop
bounds and stop flags from values all ranks agree on (all-reduce the flag), and never skip a
collective or a send on some ranks only.
""",
    invalid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, site: "train.py:30", label: step 0}
    - {op: all_reduce, site: "train.py:30", label: step 1}
  1:
    - {op: all_reduce, site: "train.py:30", label: step 0}
""",
    ),
    valid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, site: "train.py:30", label: step 0}
    - {op: all_reduce, site: "train.py:30", label: step 1}
  1:
    - {op: all_reduce, site: "train.py:30", label: step 0}
    - {op: all_reduce, site: "train.py:30", label: step 1}
""",
    ),
)
