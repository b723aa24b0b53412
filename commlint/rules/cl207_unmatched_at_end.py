from commlint.rules import Rule

RULE = Rule(
    code="CL207",
    name="unmatched-at-end",
    summary="Communication still unmatched when the ranks finish.",
    explanation="""
An async op was issued and never matched — its peer never posts the receive, or some members
never issue the collective — and nothing waits for it, so the rank runs to its end with the
op still in flight. The data is lost; under NCCL, `destroy_process_group` or process exit
with pending work hangs or aborts (PiPPy PR 1139: destroy before p2p done).
""",
    severity="error",
    kind="trace",
    fix="Issue the matching call on the peer (or drop this one) and wait on every async handle.",
    invalid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: isend, peer: 1, handle: h, site: "pipe.py:12"}
  1: []
""",
    ),
    valid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: isend, peer: 1, handle: h, site: "pipe.py:12"}
    - {op: wait, handles: [h], site: "pipe.py:14"}
  1:
    - {op: recv, peer: 0, site: "pipe.py:20"}
""",
    ),
)
