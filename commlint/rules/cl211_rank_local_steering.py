from commlint.rules import Rule

RULE = Rule(
    code="CL211",
    name="rank-local-steering",
    summary="A value read from this rank's own data decides what the rank communicates.",
    explanation="""
The dry-run computes on fake tensors: `loss.item()` of a large model has no value there.
Printing, logging or arithmetic on such a number costs nothing. When the program *tests* it
(`if loss.item() > threshold:`, `while norm > eps:`) and recording every rank again with real
tensors is over the budget (`--real-budget`, 1 GiB of tensors per rank by default), the
dry-run decides the test the same way on every rank (the placeholder's outcome, said in the
trace's `meta.assumes`) and records the first rank that made the test again with the other
outcome. Values that came out of a collective over every rank (`all_reduce`d, broadcast,
gathered, or computed only from those) are the same on every rank: their test is taken alike
everywhere and needs no second run. A value computed from the rank's own data (its batch, its
loss, its shard of the gradients) differs between ranks. If the two outcomes make the rank
communicate differently — one calls a collective the other skips, or calls another one — then
the first time the ranks' values fall on different sides of the test, some ranks wait in a
call the others never make: a hang (or a mismatch). The finding names the line that read the
value, the test, and what the rank calls under each outcome. It is the run-time counterpart of
the linter's CL102, found on the program as it runs, through any helper or framework code.
""",
    severity="error",
    kind="trace",
    fix="""
Agree on the value before testing it: reduce it across ranks (`dist.all_reduce(t,
op=ReduceOp.MAX)` of the loss or of a stop flag) or broadcast it from one rank, then branch on
the agreed value; or move the communication out of the branch, so that every rank makes it
whichever way its test goes.
""",
    invalid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, group: WORLD, site: "train.py:31"}
    - {op: barrier, group: WORLD, site: "train.py:33"}
  1:
    - {op: all_reduce, group: WORLD, site: "train.py:31"}
    - {op: barrier, group: WORLD, site: "train.py:33"}
groups: {WORLD: [0, 1]}
meta:
  tensors: fake
  steering:
    - rank: 0
      read: "train.py:29"
      test: "train.py:29"
      taken: true
      then: all_reduce on group WORLD
      then_site: "train.py:31"
      otherwise: barrier on group WORLD
      otherwise_site: "train.py:33"
      index: 0
""",
    ),
    valid=(
        """
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, group: WORLD, site: "train.py:28"}
    - {op: all_reduce, group: WORLD, site: "train.py:31"}
    - {op: barrier, group: WORLD, site: "train.py:33"}
  1:
    - {op: all_reduce, group: WORLD, site: "train.py:28"}
    - {op: all_reduce, group: WORLD, site: "train.py:31"}
    - {op: barrier, group: WORLD, site: "train.py:33"}
groups: {WORLD: [0, 1]}
meta:
  tensors: fake
  assumes: "the value read at train.py:29 was not computed (fake tensors); the test at
    train.py:29 of the value read at train.py:29 (the same on every rank (a collective's
    result), not computed) was taken as True on every rank"
""",
    ),
)
