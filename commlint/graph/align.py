"""Name the user's line: align the ranks' calls by call site, find where they first part.

The checker matches the i-th collective of a group across its members, so when one rank makes
a call the others do not, the mismatch it reports is wherever the shifted sequences first
disagree on op or size — often one collective later, and often against a call a framework
makes on its own (Lightning's strategy barrier, DDP's gradient all-reduce). The op and size
then describe the wrong pair of calls, and "pad the last batch" is the wrong fix.

Here each rank's collectives on the group are keyed by *where* they were made (op, the user's
frames, the framework frame that made the call, torch's label) and the sequences of two
disagreeing ranks are aligned (difflib's longest matching blocks) from the first position
where those keys differ:

- one side has calls the other lacks there (an insertion): a call made on some ranks only.
  The headline is that call at the user's innermost frame, with the call chain, the condition
  the rank took to get there when the source shows one, and the other ranks' next collective
  — named as the framework's or torch's own call when it is one. A size "mismatch" that
  follows is two different calls meeting, not a tensor to pad: it is reported as CL203.
- both sides have one call each there and line up again after it (a substitution): one logical
  call reached from two places. The op/size diagnosis stands, with both user lines; a size fix
  no longer says "pad" unless both sides are one call site. When exactly one side was made by
  a library (torch's DDP, a framework) and the other by the user's own code, the user's call
  is the one the others lack (the library's calls are the ones every rank's loop makes).

Framework frames are context, never the headline. Both the dry-run (`commlint run`) and the
runtime guard pass their findings through `explain`.
"""

from __future__ import annotations

import ast
import difflib
import functools
import itertools
import linecache
from dataclasses import dataclass

from commlint.findings import Finding, Location
from commlint.trace import COLLECTIVE_OPS, TORCH_ISSUED, Action, Trace

# An action whose label starts so was issued by torch's DistributedDataParallel (both front
# ends label its bucket all-reduces, model checks and broadcasts this way).
DDP_LABEL = "DDP "
_WINDOW = 256  # calls compared past the first difference: enough to line up again
_LOOKBACK = 1024  # calls before the finding searched for the first difference
_ALL_RANKS = 64  # larger groups: one rank per distinct call at the finding stands for all
_EXPLAINED = ("CL202", "CL203", "CL204")


def call_key(a: Action) -> tuple:
    """Where a call was made, and what it is: equal keys are the same call of the program."""
    return (a.op, a.group, a.root, a.site, tuple(a.stack or ()), a.via, a.label)


def library_call(a: Action) -> bool:
    """Made by torch (DDP, Join, FSDP) or by an installed framework, not by the user's line."""
    label = a.label or ""
    return a.via is not None or TORCH_ISSUED in label or label.startswith(DDP_LABEL)


@dataclass
class Divergence:
    """The first point where the ranks' collectives on `group` come from different calls."""

    group: str
    seq: int  # 0-based position on the group where they part
    kind: str  # "extra": `extra_ranks` make calls the others lack; "different": one each
    extra_ranks: list[int]
    extra: tuple[int, int]  # (rank, action index) of the first such call
    other_ranks: list[int]
    other: tuple[int, int] | None  # the others' collective at that point, if any


def _collectives(trace: Trace, rank: int, group: str, limit: int) -> list[int]:
    out = []
    for i, a in enumerate(trace.ranks.get(rank, ())):
        if a.op in COLLECTIVE_OPS and a.group == group:
            out.append(i)
            if len(out) >= limit:
                break
    return out


def first_divergence(
    trace: Trace, group: str, upto: int, ranks: list[int] | None = None
) -> Divergence | None:
    """Where the members of `group` (or the given ones) first issue collectives from
    different calls, at or before position `upto` (0-based) on the group, looking back at
    most `_LOOKBACK` calls; None when they agree there."""
    limit = upto + 1 + _WINDOW
    start = max(0, upto - _LOOKBACK)
    members = ranks if ranks is not None else trace.group_ranks(group)
    members = [r for r in members if r in trace.ranks or r in trace.ends]
    seqs: dict[int, list[int]] = {r: _collectives(trace, r, group, limit)[start:] for r in members}
    keys = {r: [call_key(trace.ranks[r][i]) for i in idx] for r, idx in seqs.items()}
    classes: dict[tuple, list[int]] = {}
    for r in members:
        classes.setdefault(tuple(keys[r]), []).append(r)
    if len(classes) < 2:
        return None
    # the two largest classes (ties: the one with the lower ranks first)
    ordered = sorted(classes.values(), key=lambda rs: (-len(rs), rs[0]))
    a_ranks, b_ranks = ordered[0], ordered[1]
    a, b = keys[a_ranks[0]], keys[b_ranks[0]]
    p = 0
    while p < len(a) and p < len(b) and a[p] == b[p]:
        p += 1
    if p > upto:
        return None
    ops = difflib.SequenceMatcher(None, a[p:], b[p:], autojunk=False).get_opcodes()
    tag, i0, i1, j0, j1 = next(op for op in ops if op[0] != "equal")
    ra, rb = a_ranks[0], b_ranks[0]

    def at(rank: int, k: int) -> tuple[int, int] | None:
        idx = seqs[rank]
        return (rank, idx[k]) if k < len(idx) else None

    if tag == "delete" or (tag == "replace" and (i1 - i0) > (j1 - j0) and j0 == 0 and i0 == 0):
        extra_ranks, extra, others, other = a_ranks, at(ra, p + i0), b_ranks, at(rb, p + j0)
        kind = "extra"
    elif tag == "insert" or (tag == "replace" and (j1 - j0) > (i1 - i0) and i0 == 0 and j0 == 0):
        extra_ranks, extra, others, other = b_ranks, at(rb, p + j0), a_ranks, at(ra, p + i0)
        kind = "extra"
    else:
        first_a, first_b = at(ra, p + i0), at(rb, p + j0)
        assert first_a is not None and first_b is not None
        kind = "different"
        lib_a = library_call(trace.ranks[ra][first_a[1]])
        lib_b = library_call(trace.ranks[rb][first_b[1]])
        if lib_a != lib_b:  # the user's own call is the one the library's loop lacks
            kind = "extra"
        if lib_a and not lib_b:
            extra_ranks, extra, others, other = b_ranks, first_b, a_ranks, first_a
        else:
            extra_ranks, extra, others, other = a_ranks, first_a, b_ranks, first_b
    if extra is None:
        return None
    seq = start + p + (i0 if extra_ranks is a_ranks else j0)
    return Divergence(group, seq, kind, sorted(extra_ranks), extra, sorted(others), other)


# -- the words ---------------------------------------------------------------------------


def _who(ranks: list[int]) -> str:
    from commlint.graph.verdict import format_ranks

    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"


def _user_frames(a: Action) -> list[str]:
    """The action's user frames, innermost first (`file:line in function`)."""
    stack = a.stack or []
    if a.site is None:
        return []
    mine = [k for k, e in enumerate(stack) if e.startswith(a.site + " in ")]
    return stack[mine[0] :] if mine else [f"{a.site} in ?"]


def _split(entry: str) -> tuple[str, int | None, str]:
    where, _, func = entry.partition(" in ")
    path, _, line = where.rpartition(":")
    return path, int(line) if line.isdigit() else None, func


def _source(path: str, line: int | None) -> str | None:
    if line is None:
        return None
    text = linecache.getline(path, line).strip()
    return text or None


@functools.lru_cache(maxsize=256)
def _tree(path: str) -> ast.AST | None:
    try:
        return ast.parse("".join(linecache.getlines(path)) or "\n")
    except (SyntaxError, ValueError):
        return None


def _condition(path: str, line: int) -> tuple[str, int] | None:
    """The innermost `if` (within the innermost function) whose body or else holds `line`:
    its text (`if rank == 0:` / `else of if rank == 0:`) and line."""
    tree = _tree(path)
    if tree is None:
        return None
    found: tuple[str, int] | None = None

    def visit(node: ast.AST) -> None:
        nonlocal found
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or end is None or not start <= line <= end:
                continue
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                found = None  # a condition outside the function is not this call's
            elif isinstance(child, ast.If) and line != start:
                test = ast.unparse(child.test)
                in_else = any(
                    getattr(s, "lineno", 0) <= line <= getattr(s, "end_lineno", 0)
                    for s in child.orelse
                )
                found = (f"else of `if {test}:`" if in_else else f"`if {test}:`", start)
            visit(child)

    visit(tree)
    return found


def _diverging_frame(trace: Trace, a: Action, others: list[int]) -> str | None:
    """The outermost user frame of `a` that the other ranks' calls never passed through,
    just inside one they did pass through: where this rank left the code they ran."""
    frames = _user_frames(a)
    if not frames:
        return None
    reached = {e for r in others[:1] for b in trace.ranks.get(r, ()) for e in b.stack or ()}
    found = frames[0]
    for inner, outer in itertools.pairwise(frames):
        if outer in reached:
            return inner
        found = outer
    return found if found not in reached else None


def call_text(a: Action) -> str:
    """`barrier(WORLD) at cb.py:9 (in `on_epoch_end`, from `trainer.fit()` at train.py:13)`."""
    frames = _user_frames(a)
    if not frames:
        return f"{a.describe()}" + (f" ({_library_text(a)})" if library_call(a) else "")
    path, line, func = _split(frames[0])
    parts = []
    if func and func not in ("?", "<module>"):
        parts.append(f"in `{func}`")
    if len(frames) > 1:
        opath, oline, _ = _split(frames[1])
        src = _source(opath, oline)
        parts.append(f"from `{src}` at {opath}:{oline}" if src else f"from {opath}:{oline}")
    detail = f" ({', '.join(parts)})" if parts else ""
    if library_call(a):
        src = _source(path, line)
        called = f"`{src}` at " if src else ""
        return f"{a.describe()}, {_library_text(a)}, made for {called}{a.site}"
    return f"{a.describe()} at {a.site}{detail}"


def _library_text(a: Action) -> str:
    if a.via:
        return f"the framework's own call ({a.via})"
    label = a.label or ""
    if label.startswith(DDP_LABEL):
        return f"torch's own call ({label.split(',')[0]})"
    return "torch's own call"


def _headline(trace: Trace, d: Divergence) -> tuple[str, list[Location], str, str | None]:
    """(sentence, related locations, fix, the user frame where the rank left the code the
    others ran) for a divergence."""
    er, ei = d.extra
    a = trace.ranks[er][ei]
    related: list[Location] = []
    where = _diverging_frame(trace, a, d.other_ranks)
    cond = None
    if where is not None:
        path, line, _ = _split(where)
        if line is not None:
            cond = _condition(path, line)
            if cond is not None:
                related.append(
                    Location(path=path, line=cond[1], message=f"the condition: {cond[0]}")
                )
    under = f", under {cond[0]} ({_split(where)[0]}:{cond[1]})" if cond and where else ""
    n = d.seq + 1
    if d.kind == "extra":
        verb = "does" if len(d.other_ranks) == 1 else "do"
        text = f"{_who(d.extra_ranks)} {'calls' if len(d.extra_ranks) == 1 else 'call'} "
        text += f"{call_text(a)}{under} — a call {_who(d.other_ranks)} {verb} not make"
    else:
        text = (
            f"{_who(d.extra_ranks)} and {_who(d.other_ranks)} reach collective #{n} on group "
            f"'{d.group}' from different calls: {_who(d.extra_ranks)} {call_text(a)}{under}"
        )
    if d.other is not None:
        orank, oi = d.other
        b = trace.ranks[orank][oi]
        if d.kind == "extra":
            text += (
                f": {_who(d.other_ranks)}'s collective #{n} on group '{d.group}' is "
                f"{call_text(b)}, which pairs with it"
            )
        else:
            text += f"; {_who(d.other_ranks)} {call_text(b)}"
        opath, oline, _ = _split(f"{b.site} in ?") if b.site else (None, None, "")
        related.append(
            Location(
                path=opath,
                line=oline,
                rank=orank,
                action=oi,
                site=b.site,
                message=f"{_who(d.other_ranks)}'s collective #{n} on '{d.group}': "
                f"{b.describe()}{', ' + _library_text(b) if library_call(b) else ''}",
            )
        )
    elif d.kind == "extra":
        verb = "issues" if len(d.other_ranks) == 1 else "issue"
        text += f": {_who(d.other_ranks)} {verb} no collective #{n} on group '{d.group}'"
    text += "."
    if d.kind == "extra":
        move = (
            f"move it out of {cond[0]} at {_split(where)[0]}:{cond[1]}"
            if cond and where
            else ("move it out of the rank condition")
        )
        fix = (
            f"Make this call on every member of '{d.group}' or on none: {move} (compute on "
            "every rank, use the result where needed). Every later collective on the group "
            "pairs with the wrong partner until then — the op or size difference reported is "
            "two different calls meeting, not a tensor to pad."
        )
    else:
        fix = (
            "These are different calls of the program: make the ranks issue the same call at "
            "this point; if both lines are meant as one call, give them the same op and shape "
            "(exchange sizes first)."
        )
    return text, related, fix, where


def _position(trace: Trace, loc: Location) -> tuple[str, int] | None:
    """(group, 0-based position on it) of the collective a location names."""
    if loc.rank is None or loc.action is None:
        return None
    actions = trace.ranks.get(loc.rank, [])
    if not 0 <= loc.action < len(actions) or actions[loc.action].op not in COLLECTIVE_OPS:
        return None
    group = actions[loc.action].group
    seq = sum(1 for a in actions[: loc.action] if a.op in COLLECTIVE_OPS and a.group == group)
    return group, seq


def explain(findings: list[Finding], trace: Trace) -> list[Finding]:
    """Re-word the mismatch and hang findings of diverging ranks at the user's line (in
    place; returns the list). The first finding on a group whose ranks part at another call
    than the one it names gets the divergence as its headline and location."""
    from commlint.rules import rule_of

    done: set[str] = set()
    for f in findings:
        if f.code not in _EXPLAINED or not f.actions or f.severity != "error":
            continue
        where = _position(trace, f.actions[0])
        if where is None or where[0] in done:
            continue
        group, seq = where
        reps = _representatives(trace, f, group)
        try:
            d = first_divergence(trace, group, seq, sorted(reps) if reps else None)
        except (KeyError, IndexError, ValueError):
            d = None  # a partial trace (guard rings): nothing to align
        if d is None:
            continue
        if reps:
            d.extra_ranks = sorted({r for rep in d.extra_ranks for r in reps.get(rep, [rep])})
            d.other_ranks = sorted(
                {r for rep in d.other_ranks for r in reps.get(rep, [rep])} - set(d.extra_ranks)
            )
        done.add(group)
        a = trace.ranks[d.extra[0]][d.extra[1]]
        same_site = (
            d.kind == "different"
            and d.other is not None
            and (_user_frames(a)[:1] == _user_frames(trace.ranks[d.other[0]][d.other[1]])[:1])
        )
        if same_site:
            continue  # one call site with different arguments: the diagnosis stands
        text, related, fix, at = _headline(trace, d)
        if d.kind == "different" and d.seq == seq:
            # two lines meeting as one call, right where the checker says: its words name
            # both lines already; only a size fix must not say "pad" for two calls
            if f.code == "CL204" and "pad" in (f.fix or ""):
                f.fix = fix
            continue
        if d.kind == "extra" and f.code == "CL204":
            f.code, f.name = "CL203", rule_of("CL203").name
        f.message = f"{text} {_consequence(f, d.seq == seq)}"
        f.fix = fix
        # at the call where the rank left the code the others ran (the call itself when the
        # others never ran its line; the caller's line when it is inside shared code)
        path, line, _ = _split(at or f"{a.site} in ?") if (at or a.site) else (None, None, "")
        if line is not None:
            f.path, f.line = path, line
        if not any(loc.rank == d.extra[0] and loc.action == d.extra[1] for loc in f.actions):
            f.actions.insert(0, Location(rank=d.extra[0], action=d.extra[1], site=a.site))
        f.ranks = sorted(set(f.ranks) | set(d.extra_ranks) | set(d.other_ranks))
        f.related.extend(related)
    return findings


def _representatives(trace: Trace, f: Finding, group: str) -> dict[int, list[int]] | None:
    """For a large group, one rank per distinct call the finding's ranks are at (and the
    ranks it waits for), with the ranks each stands for: aligning N identical sequences
    costs N times one. None: all."""
    if len(trace.group_ranks(group)) <= _ALL_RANKS:
        return None
    reps: dict[tuple, list[int]] = {}
    for loc in [*f.actions, *f.related]:
        if loc.rank is None:
            continue
        acts = trace.ranks.get(loc.rank, [])
        known = loc.action is not None and loc.action < len(acts)
        key = call_key(acts[loc.action]) if known else ()  # type: ignore[index]
        reps.setdefault((key, loc.action is None), []).append(loc.rank)
    return {ranks[0]: sorted(set(ranks)) for ranks in reps.values()}


def _consequence(f: Finding, here: bool) -> str:
    """The checker's own op-by-op words, after the headline."""
    if f.code == "CL202":
        return f"Then: {f.message}"
    if here:
        return f"Matched call by call, that is: {f.message}"
    return f"From there on the group's collectives meet the wrong partners: {f.message}"
