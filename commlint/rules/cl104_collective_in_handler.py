"""CL104: a collective inside `except` (or in `finally` after communicating `try` code)."""

from commlint.lint.analyze import RawFinding, leaf_tok
from commlint.lint.branches import _evaluate, _iter_ints, _parse, _subject_of
from commlint.lint.ir import Branch, Exit, Try
from commlint.rules import Rule


def _rank_split(program, fn, body: list, final: list) -> bool:
    """`try: if not main: barrier() ... finally: if main: barrier()` (transformers'
    `main_process_first`): the `try` body and the `finally` communicate under complementary
    tests of one variable, so no rank communicates in both — a rank that fails in its `try`
    reaches the same `finally` call it reaches anyway. True when that is proven for every
    value the tests compare with."""
    guards = []
    for nodes, side in ((body, 0), (final, 1)):
        for n in nodes:
            if not program.node_tokens(n, fn):
                continue
            if not (isinstance(n, Branch) and n.kind == "if" and len(n.arms) == 2):
                return False
            if program.tokens(n.arms[1], fn):
                return False  # the else arm communicates too
            expr = _parse(n.cond.text)
            if expr is None:
                return False
            guards.append((expr, side))
    if not guards:
        return False
    var = _subject_of(guards[0][0])
    if var is None or any(_subject_of(e) != var for e, _ in guards):
        return False
    ints = {v for e, _ in guards for v in _iter_ints(e)}
    values: list[int | bool] = [*ints, max(ints) + 1, min(ints) - 1] if ints else [True, False]
    for value in values:
        sides = set()
        for expr, side in guards:
            truth = _evaluate(expr, var, value)
            if truth is None:
                return False
            if truth:
                sides.add(side)
        if sides == {0, 1}:
            return False
    return True


def _ends_the_job(handler: list) -> bool:
    """The handler re-raises or exits: the launcher then stops every rank (a crash with a
    traceback, not a hang)."""
    return any(isinstance(n, Exit) and n.kind in ("raise", "exit") for n in handler)


BROAD = ("", "Exception", "BaseException")


def _divergent_raises(program, nodes, types: list[str]) -> list[tuple]:
    """`if rank == 0: raise ValueError(...)` (or a test of this rank's data) in the `try`
    body, of a type one of the swallowing handlers catches."""
    out = []
    for n in nodes:
        if not isinstance(n, Branch):
            continue
        cond = program.effective(n.cond)
        if cond is None or not cond.divergent:
            continue
        for arm in n.arms:
            for x in arm:
                if isinstance(x, Exit) and x.kind == "raise" and _caught(x.text, types):
                    origin = cond.origin or f"`{cond.text}` differs between ranks"
                    out.append((f"{x.text[:50]}` under `{cond.text[:40]}", x.pos, origin))
        out.extend(_divergent_raises(program, [a for arm in n.arms for a in arm], types))
    return out


def _caught(raise_text: str, types: list[str]) -> bool:
    """`raise ValueError(...)` is caught by `except ValueError`, `except (OSError,
    ValueError)`, `except Exception` or a bare `except` (a re-raise `raise` by none here)."""
    words = raise_text.split()
    if len(words) < 2:
        return False
    name = words[1].split("(")[0].rsplit(".", 1)[-1]
    for t in types:
        caught = [c.strip().rsplit(".", 1)[-1] for c in t.strip("()").split(",")]
        if t.strip() in BROAD or name in caught or any(c in BROAD[1:] for c in caught):
            return True
    return False


def _skipped_by_handler(program, fn, node: Try, body_colls) -> list[RawFinding]:
    """`try: meta = load_shard(rank); ...; dist.all_reduce(n) except FileNotFoundError:
    print(...)`: a call whose argument depends on the rank (or on this rank's data) can raise
    on some ranks only; a handler that swallows it sends those ranks past the `try` body's
    collectives, which the others wait in."""
    if not body_colls:
        return []
    quiet = [k for k, h in enumerate(node.handlers) if not _ends_the_job(h)]
    if not quiet:
        return []
    types = [node.handler_types[k] if k < len(node.handler_types) else "" for k in quiet]
    risks = list(node.rank_raises) + _divergent_raises(program, node.body, types)
    risks.sort(key=lambda r: (r[1].line, r[1].col))
    for text, pos, origin in risks:
        after = [t for t in body_colls if (t.pos.line, t.pos.col) > (pos.line, pos.col)]
        if not after:
            continue
        skipped = leaf_tok(after[0])
        return [
            RawFinding(
                code="CL104",
                message=(
                    f"`{text}` (line {pos.line}) can raise on some ranks only ({origin}); the "
                    f"`except` swallows it, so those ranks skip {skipped.op} at "
                    f"{skipped.describe()} while the others wait in it for them: the job hangs "
                    "instead of failing"
                ),
                path=fn.path,
                pos=after[0].pos,
                fix=(
                    "Keep the collective out of the `try`: record the failure in a flag, agree "
                    "on it with an all_reduce that every rank calls, then communicate (or "
                    "re-raise in the handler so the launcher stops every rank)."
                ),
                related=[(fn.path, pos, "this call can raise on some ranks only")],
            )
        ]
    return []


def check(program):
    out = []
    for fn in program.all_functions():
        for node, _conds, _cont in program.walk(fn):
            if not isinstance(node, Try):
                continue
            body_colls = program.collectives(node.body, fn)
            # a fallback for the one collective the `try` makes (`try: barrier() except
            # RuntimeError: all_reduce(flag)`): a collective that fails on some members only
            # leaves the others inside it whatever the handler does; one that fails on every
            # member (an unsupported op, a missing API) sends them all to the fallback
            fallback = node.lone_call and len(body_colls) == 1
            for h in node.handlers:
                toks = program.collectives(h, fn)
                if toks and not fallback:
                    real = leaf_tok(toks[0])
                    out.append(
                        RawFinding(
                            code="CL104",
                            message=(
                                f"{real.op} at {real.describe()} runs only on the ranks whose "
                                "`try` body raised; the other ranks are elsewhere (in the next "
                                "collective of the `try` body or past it), so this call never "
                                "finds its partners and the job hangs"
                            ),
                            path=fn.path,
                            pos=toks[0].pos,
                            fix=(
                                "Do not communicate in an exception handler: record the error "
                                "in a flag, leave the handler, and agree on it with an "
                                "all_reduce that every rank calls at the same point."
                            ),
                            related=[(fn.path, node.pos, "the `try` whose failure leads here")],
                        )
                    )
            out.extend(_skipped_by_handler(program, fn, node, body_colls))
            body = [t for t in program.tokens(node.body, fn) if leaf_tok(t).cat != "create"]
            final = program.collectives(node.final, fn)
            # only a `try` body that can fail on some ranks only (the risks a swallowing
            # handler is judged by) sends some ranks to `finally` early: a body that fails on
            # every rank alike or on none reaches it on every rank together
            risks = list(node.rank_raises) + _divergent_raises(program, node.body, [""])
            if body and final and risks and not _rank_split(program, fn, node.body, node.final):
                real = leaf_tok(final[0])
                first = leaf_tok(body[0])
                out.append(
                    RawFinding(
                        code="CL104",
                        message=(
                            f"{real.op} in `finally` at {real.describe()}: a rank that fails "
                            f"inside the `try` (`{risks[0][0]}` at line {risks[0][1].line} can "
                            f"fail on some ranks only: {risks[0][2]}; the `try` communicates, "
                            f"e.g. {first.op} at {first.describe()}) enters it while the "
                            "others are still in the `try` body's collectives; the calls "
                            "mismatch and the job hangs instead of failing"
                        ),
                        path=fn.path,
                        pos=final[0].pos,
                        fix=(
                            "Keep `finally` free of collectives (cleanup such as "
                            "destroy_process_group is fine), or let the failure propagate so "
                            "the launcher stops every rank."
                        ),
                        related=[(fn.path, node.pos, "the `try` whose body communicates")],
                    )
                )
    return out


RULE = Rule(
    code="CL104",
    name="collective-in-handler",
    summary="A collective is called in an `except` handler, or in `finally` after a `try` that "
    "communicates.",
    explanation="""
Only the ranks whose `try` body raised run an `except` handler. A collective there is called by
those ranks alone, while the others are still inside the `try` body's communication or already
past it: nobody matches it, and a crash that should have stopped the job turns into a hang (the
"stranding" failure: one rank sent half a protocol and the peer waits forever). A collective in
`finally` after a `try` that communicates has the same problem on the failure path, when the
`try` body can fail on some ranks only (the same test as below: a call whose argument depends
on the rank or on this rank's data, or a `raise` under such a condition). A `try` body that
fails on every rank alike, or on none, reaches `finally` on every rank together: `try:
train() finally: dist.barrier()` is not reported.

A `try` body whose collective comes after a call that can fail on some ranks only hangs the
same way when its handler swallows the error: `try: meta = load_shard(rank); ...;
dist.all_reduce(count) except FileNotFoundError: print(...)` sends the ranks without a shard
past the all_reduce (on to the next collective, or out of the program) while the others wait
in it. A call counts as one that can fail on some ranks only when an argument depends on the
rank or on this rank's data (a path built from the rank, `torch.load(paths[rank])`), as the
source says; a call whose arguments are the same on every rank (`json.load(open(
"config.json"))`) fails on every rank alike or on none, which the linter takes as written
(a node-local file system could still differ: not reported, as nothing in the source says
so). Output, logging and conversions (`print`, `logger.warning`, `int`, `len`) never count.
An explicit `raise` under a condition on the rank or on this rank's data (`if
torch.isnan(stats).any(): raise ValueError(...)`) counts when a swallowing handler catches its
type (by name, `Exception`, or a bare `except`).

Not reported: a handler that re-raises or exits (`raise`, `sys.exit`): the launcher stops
every rank — a crash with a traceback, not a hang. A handler that falls back to another
collective when the `try` body is that one collective call alone (`try: dist.barrier()
except RuntimeError: dist.all_reduce(flag)`).
A collective that fails on some members only leaves the others inside it whatever the handler
does, and one that fails on every member (an unsupported operation, an API missing from this
torch) sends every rank to the same fallback.
""",
    severity="error",
    kind="source",
    check=check,
    fix="""
Record the failure in a flag and agree on it after the `try` with a collective that every rank
calls, or let the exception propagate so the launcher stops every rank.
""",
    invalid=(
        """
import torch.distributed as dist

def step(model, batch, t):
    try:
        loss = model(batch)
        dist.all_reduce(t)
    except RuntimeError:
        dist.barrier()
        raise
""",
        """
import torch
import torch.distributed as dist

def load_shard(rank):
    with open(f"shard_{rank}.json") as f:
        return f.read()

def count_items(rank):
    try:
        meta = load_shard(rank)
        count = torch.tensor([len(meta)])
        dist.all_reduce(count)  # expect: CL104
    except FileNotFoundError:
        print(f"rank {rank}: no shard")
    dist.barrier()
""",
    ),
    valid=(
        """
import torch
import torch.distributed as dist

def step(model, batch, t):
    failed = torch.zeros(1)
    try:
        loss = model(batch)
    except RuntimeError:
        failed += 1
    dist.all_reduce(failed)
    if failed.item():
        raise RuntimeError("a rank failed")
    dist.all_reduce(t)
""",
        """
import torch
import torch.distributed as dist

def load_shard(rank):
    with open(f"shard_{rank}.json") as f:
        return f.read()

def count_items(rank):
    try:
        meta = load_shard(rank)
    except FileNotFoundError:
        meta = ""
    count = torch.tensor([len(meta)])
    dist.all_reduce(count)
    dist.barrier()

def count_or_fail(rank):
    try:
        meta = load_shard(rank)
        count = torch.tensor([len(meta)])
        dist.all_reduce(count)
    except FileNotFoundError:
        print(f"rank {rank}: no shard")
        raise
""",
    ),
)
