from commlint.rules import Rule

RULE = Rule(
    code="CL204",
    name="argument-mismatch",
    summary="Matched calls disagree on dtype, size, all_to_all splits or send/recv size.",
    explanation="""
The ranks meet in the same call, but their buffers disagree: a dtype that differs by rank
(pytorch issue 150433), tensors of different sizes (an uneven last batch), all_to_all split
sizes where what rank i sends to rank j is not what rank j expects from rank i (pytorch issue
117486), or a receive buffer that does not fit the send (pytorch issue 113376). NCCL hangs
waiting for bytes that never come or silently corrupts memory; gloo aborts the receiver when
it gets more bytes than it posted and silently leaves garbage when it gets fewer.
""",
    severity="error",
    kind="trace",
    fix="""
Exchange sizes before the payload (a small all_gather or all_to_all of counts), pad to a
common shape, and cast to one dtype on every rank.
""",
    invalid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: send, peer: 1, shape: [4096], dtype: float32, site: "pipe.py:20"}
  1:
    - {op: recv, peer: 0, shape: [1024], dtype: float32, site: "pipe.py:31"}
""",
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_to_all, in_splits: [2, 3], out_splits: [2, 1], site: "moe.py:88"}
  1:
    - {op: all_to_all, in_splits: [2, 2], out_splits: [3, 2], site: "moe.py:88"}
""",
    ),
    valid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: send, peer: 1, shape: [4096], dtype: float32, site: "pipe.py:20"}
  1:
    - {op: recv, peer: 0, shape: [4096], dtype: float32, site: "pipe.py:31"}
""",
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_to_all, in_splits: [2, 3], out_splits: [2, 2], site: "moe.py:88"}
  1:
    - {op: all_to_all, in_splits: [2, 2], out_splits: [3, 2], site: "moe.py:88"}
""",
    ),
)
