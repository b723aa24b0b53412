from commlint.rules import Rule

RULE = Rule(
    code="CL205",
    name="non-member-call",
    summary="A rank communicates on a group it does not belong to (or with a peer outside it).",
    explanation="""
`new_group` hands a rank outside the group a placeholder (`GroupMember.NON_GROUP_MEMBER`), and
every collective or send/recv called with it returns at once without doing anything (pytorch
issue 67600). The caller believes it took part; the members that expected it wait forever, or
the data it should have produced is missing. This is the "wrong group" bug of the multi-group
rulebook: a tensor-parallel collective called with the data-parallel group, or a group chosen
by a rank computation that is off by one.
""",
    severity="error",
    kind="trace",
    fix="""
Call group communication only on members (`if rank in group_ranks:` or
`dist.get_rank(group) >= 0`), and pass the group this rank belongs to.
""",
    invalid=(
        """
version: 1
world_size: 4
groups: {tp0: [0, 1], tp1: [2, 3]}
ranks:
  0: [{op: all_reduce, group: tp0, site: "layers.py:50"}]
  1: [{op: all_reduce, group: tp0, site: "layers.py:50"}]
  2: [{op: all_reduce, group: tp0, site: "layers.py:50"}]
  3: [{op: all_reduce, group: tp1, site: "layers.py:50"}]
""",
    ),
    valid=(
        """
version: 1
world_size: 4
groups: {tp0: [0, 1], tp1: [2, 3]}
ranks:
  0: [{op: all_reduce, group: tp0, site: "layers.py:50"}]
  1: [{op: all_reduce, group: tp0, site: "layers.py:50"}]
  2: [{op: all_reduce, group: tp1, site: "layers.py:50"}]
  3: [{op: all_reduce, group: tp1, site: "layers.py:50"}]
""",
    ),
)
