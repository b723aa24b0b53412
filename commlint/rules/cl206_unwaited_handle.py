from commlint.rules import Rule

RULE = Rule(
    code="CL206",
    name="unwaited-handle",
    summary="An async op's handle is never waited.",
    explanation="""
`isend`, `irecv` and collectives with `async_op=True` return a work handle; until `.wait()`
is called on it the buffer may still be in use. Reading a received tensor, or overwriting a
sent one, without waiting races with the communication; under NCCL the op's errors only
surface at the next synchronisation, and a handle dropped at the end of a step leaves work in
flight when the next step's collectives start. The op did complete in this trace, so this is a
risk, not a certain hang (an op that never completes is CL207).
""",
    severity="warning",
    kind="trace",
    fix="Keep every handle and call `.wait()` on it before the tensor is used or reused.",
    invalid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: isend, peer: 1, handle: h, site: "pipe.py:12"}
  1:
    - {op: recv, peer: 0, site: "pipe.py:20"}
""",
    ),
    valid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: isend, peer: 1, handle: h, site: "pipe.py:12"}
    - {op: wait, handles: [h], site: "pipe.py:13"}
  1:
    - {op: recv, peer: 0, site: "pipe.py:20"}
""",
    ),
)
