"""Branch comparison shared by CL101 (rank), CL102 (data), CL103 (early exit), CL108 (groups).

Computed once per program and cached; each rule module picks its own code.
"""

from __future__ import annotations

import ast
from collections import Counter
from functools import lru_cache

from commlint.lint.analyze import (
    Program,
    RawFinding,
    Tok,
    arm_label,
    cond_related,
    first_difference,
    leaf_tok,
    leaves,
    short,
)
from commlint.lint.ir import Branch, CallSite, Cond, Exit, Function, Loop

HANG = "they wait there for a partner that never comes, and the job hangs"


def suspected_branch_findings(program: Program) -> list[RawFinding]:
    """What the taint rules suspect of rank-dependent branches, loops and exits, before the
    per-rank evaluation refutes any (`commlint.lint.perrank_check.branch_findings`)."""
    out: list[RawFinding] = []
    for fn in program.all_functions():
        if fn.rank_guard is not None:
            out.extend(_guarded_function(program, fn))
        for node, _conds, cont in program.walk(fn):
            if isinstance(node, Branch):
                cond = program.effective(node.cond)
                if cond is None or not cond.divergent:
                    continue
                out.extend(_compare_arms(program, fn, node, cond))
                out.extend(_early_exits(program, fn, node, cond, cont))
            elif isinstance(node, CallSite):
                out.extend(_exiting_call(program, fn, node, cont))
            elif isinstance(node, Loop) and node.cond is not None:
                cond = program.effective(node.cond)
                if cond is not None and cond.divergent:
                    out.extend(_divergent_loop(program, fn, node, cond))
    return out


def _code(cond: Cond, tok: Tok) -> str:
    if tok.cat == "create":
        return "CL108"
    return "CL101" if cond.dims else "CL102"


def _subject(node: Branch, k: int, cond: Cond) -> str:
    """`rank 0` / `ranks where `x` is true` / `ranks whose data makes ...`."""
    ranks = cond.true_ranks if k == 0 else cond.false_ranks
    if node.kind == "if" and ranks is not None and len(ranks) <= 4:
        names = ", ".join(map(str, sorted(ranks)))
        return f"rank{'s' if len(ranks) > 1 else ''} {names} (`{cond.text}`)"
    return f"ranks where {arm_label(node, k)}{_data_note(cond)}"


def _subject_verb(node: Branch, k: int, cond: Cond, one: str, many: str) -> tuple[str, str]:
    """The subject of arm `k` and the verb agreeing with it (`rank 0 calls`, `ranks ... call`)."""
    who = _subject(node, k, cond)
    return who, one if who.startswith("rank ") else many


def _who_exit(node: Branch, k: int, cond: Cond) -> str:
    if node.kind == "exhaustion":
        return "ranks whose iterator runs out first (`except StopIteration`)"
    if node.kind == "oom":
        return f"ranks that run out of memory (`{cond.text}`)"
    return f"ranks where {arm_label(node, k)}{_data_note(cond)}"


def _data_note(cond: Cond) -> str:
    return "" if cond.dims else " (it depends on each rank's own data)"


def _fix(tok: Tok, group: str, cond: Cond, subgroups: bool = False) -> str:
    t = leaf_tok(tok)
    if t.cat == "coll" and t.no_group and subgroups and cond.dims:
        # the call runs on WORLD only because `group=` was forgotten (CL105's fix)
        return (
            f"Pass the group explicitly: `{t.op}(..., group=<subgroup>)` with the subgroup the "
            f"ranks of the branch at line {cond.pos.line} share, or `group=dist.group.WORLD` "
            "and move the call out of the branch if every rank is meant to take part."
        )
    if t.cat == "create":
        return (
            f"Create the group on every rank, in the same order: move `{t.op}` out of the "
            f"branch at line {cond.pos.line} (every rank must call new_group for every group, "
            "even the groups it is not a member of), or pass use_local_synchronization=True."
        )
    if cond.dims:
        return (
            f"Call {t.op} on every rank of {group}: move it out of the branch at line "
            f"{cond.pos.line} (or give the other arm the same call) and use the result only "
            "where it is needed."
        )
    return (
        f"Make the decision identical on every rank before branching: reduce the condition "
        f"first (e.g. `flag = torch.tensor(cond); dist.all_reduce(flag, op=ReduceOp.MAX)`), "
        f"then call {t.op} on all ranks or none."
    )


def _creates_subgroups(program: Program, fn: Function) -> bool:
    return any(f.creates_subgroups for f in program.files if f.path == fn.path)


def _subject_of(expr: ast.expr) -> str | None:
    """The variable a simple rank condition tests: `x`, `not x`, `x == 0`, `x in (-1, 0)`."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return _subject_of(expr.operand)
    if isinstance(expr, ast.BoolOp):
        return next((v for v in map(_subject_of, expr.values) if v), None)
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        return ast.unparse(expr.left)
    if isinstance(expr, ast.Name | ast.Attribute):
        return ast.unparse(expr)
    return None


def _int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int(node.operand)
        return None if inner is None else -inner
    return None


def _ints(node: ast.expr) -> list[int] | None:
    one = _int(node)
    if one is not None:
        return [one]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        out = [_int(el) for el in node.elts]
        return None if None in out else out  # type: ignore[return-value]
    return None


_COMPARE = {
    ast.Eq: lambda v, k: v == k,
    ast.NotEq: lambda v, k: v != k,
    ast.Lt: lambda v, k: v < k,
    ast.LtE: lambda v, k: v <= k,
    ast.Gt: lambda v, k: v > k,
    ast.GtE: lambda v, k: v >= k,
}


def _evaluate(expr: ast.expr, var: str, value: int | bool) -> bool | None:
    """The truth of a simple condition when `var` has `value`; None when it cannot tell."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        inner = _evaluate(expr.operand, var, value)
        return None if inner is None else not inner
    if isinstance(expr, ast.BoolOp):
        truths = [_evaluate(v, var, value) for v in expr.values]
        if isinstance(expr.op, ast.And):
            return False if False in truths else (None if None in truths else True)
        return True if True in truths else (None if None in truths else False)
    if isinstance(expr, ast.Name | ast.Attribute) and ast.unparse(expr) == var:
        return bool(value)
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        if ast.unparse(expr.left) != var or isinstance(value, bool):
            return None
        lits = _ints(expr.comparators[0])
        if lits is None:
            return None
        op = expr.ops[0]
        if isinstance(op, ast.In | ast.NotIn):
            return (value in lits) == isinstance(op, ast.In)
        compare = _COMPARE.get(type(op))
        if len(lits) != 1 or compare is None:
            return None
        return compare(value, lits[0])
    return None


@lru_cache(maxsize=4096)
def _parse(text: str) -> ast.expr | None:
    """The condition's expression (memoised: a file repeats its condition texts; callers only
    read the tree)."""
    try:
        return ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError):  # a truncated or odd condition text: no compensation
        return None


@lru_cache(maxsize=16384, typed=True)  # `True` is not `1` here
def _truth(text: str, var: str, value: int | bool) -> bool | None:
    """`_evaluate` of a condition's text (memoised: a file repeats its condition texts, and
    each evaluation unparsed the tested expression again)."""
    expr = _parse(text)
    return None if expr is None else _evaluate(expr, var, value)


@lru_cache(maxsize=4096)
def _subject_of_text(text: str) -> str | None:
    expr = _parse(text)
    return _subject_of(expr) if expr is not None else None


# Distinct literal values the conditions of one block may compare their variable with before
# the compensation proof gives up (and the finding stands): the proof replays the block once per
# value, so it costs values x block length.
MAX_COMPENSATION_VALUES = 32


def _compensated(program, fn, node: Branch, group: str) -> bool:
    """`if not main: barrier()` ... `if main: barrier()` (or Hugging Face's `local_rank not in
    [-1, 0]` ... `local_rank == 0`): over the whole block, every rank value issues the same
    sequence. A negative rank means "not distributed" and is left out.

    The block's conditions and the replay of the block per value are shared by every branch of
    the block (memoised on the program): a block of n rank tests costs O(n), not O(n^2)."""
    if node.kind != "if" or len(node.arms) != 2:
        return False
    block, _ = program.siblings.get(id(node), ([node], 0))
    if len(block) < 2:
        return False
    var = _subject_of_text(node.cond.text)
    if var is None:
        return False
    conds, candidates = _block_conditions(program, block, var)
    if len(candidates) > MAX_COMPENSATION_VALUES:
        return False
    own = {_truth(node.cond.text, var, v) for v in candidates}
    if own != {True, False}:
        return False
    memo = program._compensation
    key = ("same", id(block), var, group, fn.key)
    if key not in memo:
        memo[key] = _same_for_every_value(program, fn, block, conds, var, candidates, group)
    return memo[key]


def _block_conditions(program, block: list, var: str) -> tuple[dict[int, str], list]:
    """The two-armed `if`s of `block` that test `var` (by node id), and the values to try."""
    memo = program._compensation
    key = ("conds", id(block), var)
    got = memo.get(key)
    if got is None:
        conds: dict[int, str] = {}  # node id -> the text of its condition
        values: set[int] = set()
        for n in block:
            two_armed_if = isinstance(n, Branch) and n.kind == "if" and len(n.arms) == 2
            if two_armed_if and _subject_of_text(n.cond.text) == var:
                e = _parse(n.cond.text)
                conds[id(n)] = n.cond.text
                values.update(_iter_ints(e))
        candidates: list[int | bool] = [v for v in values if v >= 0]
        candidates += [max(values, default=0) + 1] if values else [True, False]
        got = memo[key] = (conds, candidates)
    return got


def _same_for_every_value(program, fn, block, conds, var: str, candidates, group: str) -> bool:
    seqs: list[list] = []
    for value in candidates:
        toks: list[Tok] = []
        for n in block:
            text = conds.get(id(n))
            truth = _truth(text, var, value) if text is not None else None
            if truth is None:
                toks.extend(program.node_tokens(n, fn))
            else:
                toks.extend(program.tokens(n.arms[0] if truth else n.arms[1], fn))
        seqs.append([t.key() for t in program.project(toks, group)])
    if all(s == seqs[0] for s in seqs):
        return True
    # Megatron's dataset build: `if rank == 0: build()` / `barrier()` / `if rank != 0:
    # build()`, where build() may take barriers: barriers carry nothing and pair with any
    # barrier of the group, so sequences of barriers alone meet whenever their counts do,
    # in whatever order the ranks take them
    if all(_only_barriers(s) for s in seqs):
        return all(Counter(s) == Counter(seqs[0]) for s in seqs)
    return False


def _only_barriers(keys) -> bool:
    """Tok keys (`Tok.key`) of barriers, or of branches and loops holding only barriers."""
    for k in keys:
        if k[0] in ("alt", "loop"):
            if not all(_only_barriers(arm) for arm in k[1]):
                return False
        elif k[0] != "coll" or k[1] != "barrier":
            return False
    return True


def _iter_ints(expr: ast.AST):
    """Every integer literal in the condition (`-1` as one)."""
    v = _int(expr) if isinstance(expr, ast.expr) else None
    if v is not None:
        yield v
        return
    for child in ast.iter_child_nodes(expr):
        yield from _iter_ints(child)


def _compare_arms(program: Program, fn: Function, node: Branch, cond: Cond) -> list[RawFinding]:
    arms = program.live_arms(node, fn)
    if len(arms) < len(node.arms):  # an arm raises (a crash, not a hang)
        if len(arms) < 2:
            return []
        arms = [program.tokens(a, fn) for a in node.arms]  # (arm labels follow the indices)
    out: list[RawFinding] = []
    reported: set[tuple] = set()
    for group in program.groups_of([t for a in arms for t in a]):
        if not program.divergent(cond, group, fn):
            continue
        proj = [program.project(a, group) for a in arms]
        keys = [tuple(t.key() for t in p) for p in proj]
        if all(k == keys[0] for k in keys):
            out.extend(_root_mismatch(fn, node, cond, proj, group, reported))
            out.extend(_payload_mismatch(fn, node, cond, proj, group, reported))
            out.extend(_order_mismatch(fn, node, cond, proj, group, reported))
            continue
        if _compensated(program, fn, node, group):
            continue
        _, k, tok, other = first_difference(proj)
        if not _first_report(tok, reported):
            continue
        real = leaf_tok(tok)
        gname = _group_name(group)
        if other is None:
            rest = (
                f"the other ranks skip it and block in their next collective on {gname} "
                f"instead: neither side finds its partner and the job hangs"
            )
        else:
            o = leaf_tok(other)
            rest = (
                f"the other ranks call {o.op} at {o.describe()} instead: the calls do not "
                "match, so both sides hang (or exchange the wrong data)"
            )
        kind = "loop" if tok.cat == "loop" and real is not tok else ""
        what = f"{real.op}{' (in a loop)' if kind else ''}"
        who, verb = _subject_verb(node, k, cond, "calls", "call")
        msg = f"{who} {verb} {what} on {gname} at {real.describe()}; {rest}"
        if (
            (tok.cat == "create" or real.cat == "create")
            and other is not None
            and (leaf_tok(other).cat == "create")
        ):
            o = leaf_tok(other)
            msg = (
                f"ranks where {arm_label(node, k)} create {real.op} at {real.describe()} "
                f"while the other ranks create {o.op} at {o.describe()} at that point: groups "
                "must be created in the same order on every rank, otherwise each side's "
                "new_group waits for a different group's creation and the job hangs"
            )
        elif tok.cat == "create" or real.cat == "create":
            msg = (
                f"only ranks where {arm_label(node, k)} create a process group with "
                f"{real.op} at {real.describe()}; group creation is a collective over the "
                "parent group, so the ranks that skip it create their next groups under "
                "different names and every later collective on them hangs"
            )
        out.append(
            _finding(
                fn,
                cond,
                code=_code(cond, real),
                message=msg,
                pos=tok.pos,
                fix=_fix(real, gname, cond, _creates_subgroups(program, fn)),
            )
        )
    if cond.data:
        out.extend(_data_p2p(fn, node, cond, arms))
    if not out:
        out.extend(_p2p_payloads(fn, node, cond, arms, reported))
    if not out:
        out.extend(_interleaving(program, fn, node, cond, arms, reported))
    return out


def _p2p_payloads(fn: Function, node: Branch, cond: Cond, arms, reported):
    """Arms that send (or receive) the same messages on a group, but with buffers of another
    dtype or size, or in another order: the peer's side expects one of them."""
    out: list[RawFinding] = []
    p2p = [[t for t in leaves(a) if t.cat == "p2p" and t.p2p in ("send", "recv")] for a in arms]
    for group in dict.fromkeys(t.group for a in p2p for t in a):
        proj = [[t for t in a if t.group == group] for a in p2p]
        keys = [[t.key() for t in a] for a in proj]
        if not keys[0] or any(k != keys[0] for k in keys):
            continue
        out.extend(_payload_mismatch(fn, node, cond, proj, group, reported))
        out.extend(_order_mismatch(fn, node, cond, proj, group, reported))
    return out


def _interleaving(program: Program, fn: Function, node: Branch, cond: Cond, arms, reported):
    """Each group's sequence is the same in every arm, but the arms interleave two groups
    that the condition splits in another order (`all_reduce(g=dp); all_reduce(g=world)` on one
    rank, the reverse on the others): a rank waits on one group for a peer that waits for it
    on the other — a wait-for cycle."""
    groups = [
        g for g in program.groups_of([t for a in arms for t in a]) if program.divergent(cond, g, fn)
    ]
    if len(groups) < 2:
        return []
    seqs = [
        [t for t in leaves(a) if t.cat == "coll" and t.group in groups and t.blocking] for a in arms
    ]
    keys = [[t.key() for t in s] for s in seqs]
    if all(k == keys[0] for k in keys):
        return []
    for g in groups:  # the per-group orders must agree, or the other comparison reports it
        per = [[k for k in ks if k[2] == g] for ks in keys]
        if any(p != per[0] for p in per):
            return []
    j = next(j for j, k in enumerate(keys) if k != keys[0])
    i = next(i for i, (a, b) in enumerate(zip(keys[0], keys[j], strict=False)) if a != b)
    mine, theirs = seqs[0][i], seqs[j][i]
    # a cycle needs two ranks, one per side, that share both groups: sure when one of them
    # is the whole world (then both are members of the other, which the condition splits);
    # two orthogonal subgroups (tp x dp) share one rank only and drain without a cycle
    if not any(_whole_world(program, fn, g) for g in (mine.group, theirs.group)):
        return []
    if not _first_report(mine, reported):
        return []
    g1, g2 = _group_name(mine.group), _group_name(theirs.group)
    who, verb = _subject_verb(node, 0, cond, "calls", "call")
    return [
        _finding(
            fn,
            cond,
            code=_code(cond, mine),
            message=(
                f"{who} {verb} {mine.op} on {g1} at {mine.describe()} first, while the other "
                f"ranks ({arm_label(node, j)}) call {theirs.op} on {g2} at {theirs.describe()} "
                f"first: a rank waiting on {g1} for a peer that waits on {g2} (and the reverse) "
                "is a wait-for cycle, and the job hangs"
            ),
            pos=mine.pos,
            fix=(
                f"Issue the collectives on {g1} and {g2} in the same order on every rank "
                f"(the order of the branch at line {cond.pos.line} must not depend on the rank)."
            ),
        )
    ]


def _data_p2p(fn: Function, node: Branch, cond: Cond, arms) -> list[RawFinding]:
    """A send or receive under a data-dependent condition: the peer's matching call does not
    follow this rank's data, so one side waits for a message that never comes."""
    seqs = [[t for t in leaves(a) if t.cat == "p2p" and t.p2p in ("send", "recv")] for a in arms]
    keys = [[t.key() for t in s] for s in seqs]
    if all(k == keys[0] for k in keys):
        return []
    n = max(len(s) for s in seqs)
    for i in range(n):
        at = [s[i] if i < len(s) else None for s in seqs]
        if len({t.key() if t else None for t in at}) == 1:
            continue
        k = next(j for j, t in enumerate(at) if t is not None)
        tok = at[k]
        other = next((t for j, t in enumerate(at) if j != k and t is not None), None)
        gname = _group_name(tok.group)
        instead = (
            f"the other ranks call {other.op} at {other.describe()} at that point"
            if other is not None
            else "the other ranks skip it"
        )
        peer = "receive" if tok.p2p == "send" else "send"
        return [
            _finding(
                fn,
                cond,
                code=_code(cond, tok),
                message=(
                    f"ranks where {arm_label(node, k)}{_data_note(cond)} call {tok.op} on "
                    f"{gname} at {tok.describe()}; {instead}. The peer's matching {peer} does "
                    f"not follow this rank's data, so one side waits for a message that never "
                    "comes and the job hangs"
                ),
                pos=tok.pos,
                fix=(
                    "Make the decision identical on both sides of the exchange before branching "
                    "(send the flag to the peer first, or all_reduce it), then send and receive "
                    "on both sides or on neither."
                ),
            )
        ]
    return []


def _root_mismatch(fn: Function, node: Branch, cond: Cond, proj, group, reported) -> list:
    """The arms issue the same calls on `group`, but a rooted one names different roots:
    `if rank == 1: broadcast(t, src=1, group=g) else: broadcast(t, src=0, group=g)`."""
    flat = [list(leaves(a)) for a in proj]
    for at in zip(*flat, strict=False):
        roots = [t.root for t in at]
        known = [(k, r) for k, r in enumerate(roots) if r is not None]
        if len(known) < 2 or len({r for _, r in known}) == 1:
            continue
        (k, mine), (j, theirs) = known[0], next(x for x in known if x[1] != known[0][1])
        tok, other = at[k], at[j]
        if not _first_report(tok, reported):
            return []
        gname = _group_name(group)
        who, verb = _subject_verb(node, k, cond, "calls", "call")
        return [
            _finding(
                fn,
                cond,
                code=_code(cond, tok),
                message=(
                    f"{who} {verb} {tok.op} on {gname} with `{mine}` at {tok.describe()}, the "
                    f"other ranks ({arm_label(node, j)}) with `{theirs}` at {other.describe()}: "
                    "the members disagree on the root, so the calls do not match and the job "
                    "hangs (or uses the wrong rank's data)"
                ),
                pos=tok.pos,
                fix=(
                    f"Pass the same root to {tok.op} on every rank of {gname} (compute it from "
                    "the group, e.g. its first member, not from the branch)."
                ),
            )
        ]
    return []


def _describe_payload(p: tuple[str, str]) -> str:
    if not p[1]:
        return f"`{p[0]}` itself"
    if p[1] == "size":
        return f"`{p[0]}` with more elements"
    return f"`{p[0]}` converted to {p[1].split(' ', 1)[1]}"


def _payload_mismatch(fn: Function, node: Branch, cond: Cond, proj, group, reported) -> list:
    """The arms issue the same collective on `group`, but one passes a buffer made from the
    other arm's with another dtype or more elements (`buf = t.to(torch.float64)`,
    `torch.cat([t, pad])`): the members' buffers disagree (a size error, a hang, or silently
    mixed data)."""
    flat = [list(leaves(a)) for a in proj]
    for at in zip(*flat, strict=False):
        loads = [t.payload for t in at]
        if len({len(x) for x in loads}) != 1:
            continue
        for i in range(len(loads[0])):
            made = [x[i] for x in loads]
            k = next((j for j, p in enumerate(made) if p[1]), None)
            if k is None:
                continue
            j = next(
                (j for j, p in enumerate(made) if p[0] == made[k][0] and p[1] != made[k][1]),
                None,
            )
            if j is None:
                continue
            tok, other = at[k], at[j]
            if not _first_report(tok, reported):
                return []
            gname = _group_name(group)
            who, verb = _subject_verb(node, k, cond, "passes", "pass")
            return [
                _finding(
                    fn,
                    cond,
                    code=_code(cond, tok),
                    message=(
                        f"{who} {verb} {_describe_payload(made[k])} to {tok.op} on {gname} at "
                        f"{tok.describe()}, the other ranks ({arm_label(node, j)}) pass "
                        f"{_describe_payload(made[j])} at {other.describe()}: "
                        + (
                            "the peer's side expects one dtype and size, so the message fails "
                            "or is misread"
                            if tok.cat == "p2p"
                            else "the members' buffers differ in dtype or size, so the call "
                            "fails, hangs or mixes mismatched data"
                        )
                    ),
                    pos=tok.pos,
                    fix=(
                        f"Give {tok.op} the same dtype and number of elements on every rank of "
                        f"{gname}: convert or pad on all ranks, or on none."
                    ),
                    payload=True,
                )
            ]
    return []


def _finding(
    fn: Function, cond: Cond, code: str, message: str, pos, fix: str, payload: bool = False
) -> RawFinding:
    """A finding at `pos` in `fn`, pointing back at the branch condition that splits ranks."""
    return RawFinding(
        code=code,
        message=message,
        path=fn.path,
        pos=pos,
        fix=fix,
        related=[cond_related(fn, cond)],
        payload=payload,
    )


def _first_report(tok, reported: set) -> bool:
    """Record that `tok`'s site is reported; False if it already was (one finding a site)."""
    where = (tok.path, tok.pos.line, tok.pos.col)
    if where in reported:
        return False
    reported.add(where)
    return True


def _group_name(group: str) -> str:
    return "WORLD" if group == "WORLD" else f"group `{group}`"


def _whole_world(program: Program, fn: Function, group: str) -> bool:
    return group == "WORLD" or program.membership(fn, group) == (None, (1, 0))


def _order_mismatch(fn: Function, node: Branch, cond: Cond, proj, group, reported) -> list:
    """The arms issue the same calls on `group` with the same buffers, in another order
    (`all_reduce(g2); all_reduce(g1)` on one rank, `g1` then `g2` on the others): each call
    pairs with the other rank's other buffer."""
    flat = [list(leaves(a)) for a in proj]
    names = [[t.payload[0][0] if t.payload else None for t in a] for a in flat]
    for j in range(1, len(names)):
        a, b = names[0], names[j]
        if None in a or None in b or a == b or sorted(a) != sorted(b):
            continue
        i = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        tok, other = flat[0][i], flat[j][i]
        if any(x.root != y.root for x, y in zip(flat[0], flat[j], strict=False)):
            continue  # other peers or roots: another exchange, not the same one reordered
        if not _first_report(tok, reported):
            return []
        gname = _group_name(group)
        who, verb = _subject_verb(node, 0, cond, "passes", "pass")
        return [
            _finding(
                fn,
                cond,
                code=_code(cond, tok),
                message=(
                    f"{who} {verb} `{a[i]}` to {tok.op} on {gname} at {tok.describe()}, where "
                    f"the other ranks ({arm_label(node, j)}) pass `{b[i]}` "
                    f"at {other.describe()}: the arms use the same buffers in another order, "
                    "so each call pairs with the wrong data (or sizes that do not match)"
                ),
                pos=tok.pos,
                fix=(
                    f"Issue the calls on {gname} in the same order on every rank, whatever the "
                    f"branch at line {cond.pos.line} decides."
                ),
            )
        ]
    return []


def _guarded_function(program: Program, fn: Function) -> list[RawFinding]:
    cond = fn.rank_guard
    assert cond is not None
    toks = program.summary(fn)
    for t in toks:
        real = leaf_tok(t)
        if real.cat not in ("coll", "create"):
            continue
        return [
            _finding(
                fn,
                cond,
                code="CL108" if real.cat == "create" else "CL101",
                message=(
                    f"`{fn.name}` runs on one rank only ({cond.text}) but calls {real.op} at "
                    f"{real.describe()}; the other ranks never enter it: {HANG}"
                ),
                pos=t.pos,
                fix=f"Remove {cond.text} from `{fn.name}` and call it on every rank, or move "
                f"{real.op} out of `{fn.name}` into code that every rank runs.",
            )
        ]
    return []


def _divergent_loop(program: Program, fn: Function, node: Loop, cond: Cond) -> list[RawFinding]:
    body = program.tokens(node.body, fn)
    for group in program.groups_of(body):
        if not program.divergent(cond, group, fn):
            continue
        proj = program.project(body, group)
        if not proj:
            continue
        real = leaf_tok(proj[0])
        gname = _group_name(group)
        return [
            _finding(
                fn,
                cond,
                code=_code(cond, real),
                message=(
                    f"the loop at line {node.pos.line} runs a number of times that differs "
                    f"between ranks (`{cond.text}`) and calls {real.op} on {gname} at "
                    f"{real.describe()} in every iteration; the ranks with fewer iterations "
                    f"stop calling it: {HANG}"
                ),
                pos=proj[0].pos,
                fix=(
                    "Give every rank the same number of iterations (agree on the count with an "
                    "all_reduce of the local count, op=MAX or MIN, before the loop, or use "
                    "DistributedSampler / `join()` for uneven inputs)."
                ),
            )
        ]
    return []


EXIT_WORDS = {
    "return": "return",
    "break": "leave the loop",
    "continue": "skip the rest of the iteration",
    "raise": "raise",
    "exit": "exit the process",
}


def _early_exits(program: Program, fn: Function, node: Branch, cond: Cond, cont) -> list:
    out: list[RawFinding] = []
    for k, arm in enumerate(node.arms):
        for i, n in enumerate(arm):
            if not isinstance(n, Exit):
                continue
            if n.kind == "raise":
                break  # a raise ends the rank and the launcher stops the job: crash, not hang
            skipped = program.continuation(cont, n.kind, fn)
            if not skipped:
                break
            taken = program.tokens(arm[:i], fn)
            others = [
                program.tokens(a, fn) + skipped
                for j, a in enumerate(node.arms)
                if j != k and not any(isinstance(x, Exit) for x in a)
            ]
            if not others:
                break
            for group in program.groups_of(skipped):
                if not program.divergent(cond, group, fn):
                    continue
                mine = [t.key() for t in program.project(taken, group)]
                theirs = program.project(others[0], group)
                if mine == [t.key() for t in theirs]:
                    continue
                missed = program.project(skipped, group)
                if not missed:
                    continue
                real = leaf_tok(missed[0])
                gname = _group_name(group)
                verb = EXIT_WORDS.get(n.kind, n.kind)
                out.append(
                    _finding(
                        fn,
                        cond,
                        code="CL103",
                        message=(
                            f"{_who_exit(node, k, cond)} {verb} at line "
                            f"{n.pos.line} and never reach {real.op} at {real.describe()}, "
                            f"which the other ranks enter: {HANG} on {gname}"
                        ),
                        pos=n.pos,
                        fix=(
                            f"Let every rank reach {real.op}: agree on the exit first (e.g. "
                            "all_reduce a stop flag with op=MAX and leave on all ranks "
                            f"together), or move the {n.kind} after the communication."
                        ),
                    )
                )
                break
            break
    return out


def may_exit(program: Program, fn: Function, depth: int = 0):
    """(exit, condition, function, chain) if `fn` may end the process on some ranks only."""
    memo = program._may_exit
    if fn.key in memo:
        return memo[fn.key]
    memo[fn.key] = None
    found = None
    for node, conds, _cont in program.walk(fn):
        if isinstance(node, Exit) and node.kind == "exit":
            cond = next(
                (program.effective(c) for c in conds if c and program.effective(c).divergent),
                None,
            )
            if cond is not None:
                found = (node, cond, fn, ())
                break
        elif isinstance(node, CallSite) and depth < 6:
            callee = program.resolve(node)
            if callee is not None and callee.key != fn.key:
                inner = may_exit(program, callee, depth + 1)
                if inner is not None:
                    found = (inner[0], inner[1], inner[2], (f"{node.text}()", *inner[3]))
                    break
    memo[fn.key] = found
    return found


def _exiting_call(program: Program, fn: Function, site: CallSite, cont) -> list[RawFinding]:
    callee = program.resolve(site)
    if callee is None or callee.key == fn.key:
        return []
    found = may_exit(program, callee)
    if found is None:
        return []
    exit_node, cond, where, chain = found
    skipped = program.continuation(cont, "exit", fn)
    missed = [t for t in skipped if leaf_tok(t).cat in ("coll", "create")]
    if not missed:
        return []
    real = leaf_tok(missed[0])
    via = " → ".join((f"{site.text}()", *chain))
    return [
        RawFinding(
            code="CL103",
            message=(
                f"{via} ends the process at {short(where.path)}:{exit_node.pos.line} "
                f"(`{exit_node.text}`) on the ranks where `{cond.text}` holds; they never reach "
                f"{real.op} at {real.describe()}, which the other ranks enter: {HANG}"
            ),
            path=fn.path,
            pos=site.pos,
            fix=(
                f"Let every rank reach {real.op} before exiting, or have all ranks exit "
                "together after agreeing on it."
            ),
            related=[cond_related(where, cond)],
        )
    ]
