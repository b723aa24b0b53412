from commlint.rules import Rule

RULE = Rule(
    code="CL208",
    name="root-outside-group",
    summary="The root of broadcast/reduce/gather/scatter is not a member of the group.",
    explanation="""
Roots are global ranks. A root that is not in the group — usually a group-local rank such as
`src=0` used on a subgroup that does not contain global rank 0 — makes the call raise at once
on this rank ("ValueError: ... not part of group"), and the members that did call it wait for
it forever.
""",
    severity="error",
    kind="trace",
    fix="Convert group ranks to global ones: `dist.get_global_rank(group, 0)`.",
    invalid=(
        """
version: 1
world_size: 4
groups: {dp1: [2, 3]}
ranks:
  2: [{op: broadcast, group: dp1, root: 0, site: "ckpt.py:77"}]
  3: [{op: broadcast, group: dp1, root: 0, site: "ckpt.py:77"}]
""",
    ),
    valid=(
        """
version: 1
world_size: 4
groups: {dp1: [2, 3]}
ranks:
  2: [{op: broadcast, group: dp1, root: 2, site: "ckpt.py:77"}]
  3: [{op: broadcast, group: dp1, root: 2, site: "ckpt.py:77"}]
""",
    ),
)
