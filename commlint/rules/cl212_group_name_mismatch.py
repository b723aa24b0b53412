from commlint.rules import Rule

RULE = Rule(
    code="CL212",
    name="group-name-mismatch",
    summary="The members of a process group name it differently, so its rendezvous never "
    "completes.",
    explanation="""
torch names a group made by `new_group` with a counter: the n-th `new_group` call of a rank
makes group "n", and the name prefixes the group's rendezvous keys in the store. That is why
every rank — member or not — must call `new_group` for every group, in the same order. A rank
that skips a call (`if rank in ranks: new_group(ranks)`) names every later group one lower:
the members of those groups wait for each other under different names (gloo when the group is
created, NCCL at its first collective) until the timeout. Two different groups created under
one name share their store keys and connect the wrong peers. The dry-run records each rank's
`new_group` calls (`meta.group_creations`) and compares them; groups created with
`use_local_synchronization=True` are named by their members and are only checked among them.
""",
    severity="error",
    kind="trace",
    fix="""
Call `new_group` on every rank with the same ranks in the same order (build every group in one
loop on all ranks and keep the one this rank belongs to), or pass
`use_local_synchronization=True` when only the members call it.
""",
    invalid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, group: g0_1, site: "train.py:12"}
  1:
    - {op: all_reduce, group: g0_1, site: "train.py:12"}
groups: {g0_1: [0, 1]}
meta:
  group_creations:
    "0":
      - {name: "1", ranks: [0], site: "train.py:9"}
      - {name: "2", ranks: [0, 1], site: "train.py:10"}
    "1":
      - {name: "1", ranks: [0, 1], site: "train.py:10"}
""",
    ),
    valid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, group: g0_1, site: "train.py:12"}
  1:
    - {op: all_reduce, group: g0_1, site: "train.py:12"}
groups: {g0_1: [0, 1]}
meta:
  group_creations:
    "0":
      - {name: "1", ranks: [0], site: "train.py:9"}
      - {name: "2", ranks: [0, 1], site: "train.py:10"}
    "1":
      - {name: "1", ranks: [0], site: "train.py:9"}
      - {name: "2", ranks: [0, 1], site: "train.py:10"}
""",
    ),
)
