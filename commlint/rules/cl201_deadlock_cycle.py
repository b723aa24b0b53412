from commlint.rules import Rule

RULE = Rule(
    code="CL201",
    name="deadlock-cycle",
    summary="Ranks wait for each other in a cycle: the job hangs until the collective timeout.",
    explanation="""
Every rank in the cycle is blocked in a communication call whose counterpart is owed by the
next rank in the cycle, which is itself blocked. No rank can move: under NCCL the job hangs
until the watchdog timeout (10 minutes by default) and then dies on every GPU; under gloo
every rank raises "Timed out". The finding lists each edge of the wait-for graph (the
blocked action, its group and call site, and the rank it waits for), every elementary cycle
smallest first, and the ranks stuck behind the cycle.

Typical causes: two ranks that both `send` before they `recv` (dl2, Fig. 1); collectives on
two groups issued in a different order on different ranks; a collective on one rank while
its peer waits in a point-to-point receive.
""",
    severity="error",
    kind="trace",
    fix="""
Issue communication in one order on every rank: parity-ordered send/recv (even ranks send
first), `isend`/`irecv` (or `batch_isend_irecv`) with both handles waited, and collectives on
several groups in one fixed global order.
""",
    invalid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: send, peer: 1, shape: [1024], site: "train.py:8"}
    - {op: recv, peer: 1, shape: [1024], site: "train.py:9"}
  1:
    - {op: send, peer: 0, shape: [1024], site: "train.py:13"}
    - {op: recv, peer: 0, shape: [1024], site: "train.py:14"}
""",
        """
version: 1
world_size: 4
groups: {tp: [0, 1], dp: [0, 2]}
ranks:
  0:
    - {op: all_reduce, group: tp, site: "step.py:20"}
    - {op: all_reduce, group: dp, site: "step.py:21"}
  1:
    - {op: all_reduce, group: tp, site: "step.py:20"}
  2:
    - {op: recv, peer: 3, site: "step.py:30"}
    - {op: all_reduce, group: dp, site: "step.py:31"}
  3:
    - {op: all_reduce, group: WORLD, site: "step.py:40"}
    - {op: send, peer: 2, site: "step.py:41"}
""",
    ),
    valid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: send, peer: 1, shape: [1024], site: "train.py:8"}
    - {op: recv, peer: 1, shape: [1024], site: "train.py:9"}
  1:
    - {op: recv, peer: 0, shape: [1024], site: "train.py:13"}
    - {op: send, peer: 0, shape: [1024], site: "train.py:14"}
""",
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: isend, peer: 1, handle: s, batch: b, site: "train.py:8"}
    - {op: irecv, peer: 1, handle: r, batch: b, site: "train.py:8"}
    - {op: wait, handles: [s, r]}
  1:
    - {op: isend, peer: 0, handle: s, batch: b, site: "train.py:8"}
    - {op: irecv, peer: 0, handle: r, batch: b, site: "train.py:8"}
    - {op: wait, handles: [s, r]}
""",
    ),
)
