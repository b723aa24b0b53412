"""Values that a collective made the same on every rank, followed through what the program
computes from them.

`dist.broadcast(t)` makes `t` the same on every member; so is `t[:, -1].argmax(-1)`, and
so are flags a helper computes from it (`done = update(done, tokens)`), and `torch.all` of
them: a loop that leaves on such a flag leaves on every rank together. Whether a project
function returns a collective's result, or only what it computes from its arguments, is
known only once every file is extracted, so a value carries the question (`Agreement`) and
the analysis answers it (`Program.agreed`):

- its *sources*: project calls whose result may be a collective's (`()`: one seen here),
  each with the project calls that must return nothing of the rank's own (no rank, no data
  read, no rank tensor) for that source's agreement to reach the value: the calls the value
  went through after it, and the values mixed in on the way;
- the calls it went *through*, all of them: what a value mixed into another must vouch for.

What the caller handed in, attributes and constants do not undo the agreement: the linter
takes, as it does for the rank, that a caller hands every rank the same arguments (an
argument read on its own, `loss.item()`, stays this rank's data).
"""

from __future__ import annotations

from dataclasses import dataclass

Names = tuple[str, ...]  # a call's candidate qualified names, best first
SEEN_HERE: Names = ()  # a collective's result in this file: a source without a question
Source = tuple[Names, tuple[Names, ...]]  # (the call, the calls that must be clean)
MAX_SOURCES = 16
MAX_THROUGH = 96  # beyond this many calls to vouch for, the agreement is not claimed


@dataclass(frozen=True)
class Agreement:
    sources: tuple[Source, ...]
    through: tuple[Names, ...] = ()

    @property
    def settled(self) -> bool:
        """Agreed with nothing left to ask: a collective's result, through no project call."""
        return (SEEN_HERE, ()) in self.sources


def _through(v) -> tuple[Names, ...]:
    """The project calls a value went through (a value without an agreement: its deps)."""
    if v.agreed is not None:
        return v.agreed.through
    return tuple((d,) for d in v.deps)


def combine(vals) -> Agreement | None:
    """A value computed from `vals` (`a + b`, `t[i]`, `f(a, b)` of a library): agreed when
    one of them is and none of the others holds anything of the rank's own."""
    vals = list(vals)
    if not any(v.agreed is not None or v.collective_result for v in vals):
        return None  # nothing agreed to start from (most values)
    for v in vals:
        if v.rank_tensor or (v.tainted() and not v.agreeing):
            return None
    throughs = [_through(v) for v in vals]
    through = dict.fromkeys(n for t in throughs for n in t)
    if len(through) > MAX_THROUGH:
        return None
    sources: dict[Source, None] = {}
    for k, v in enumerate(vals):
        own = (v.agreed.sources if v.agreed is not None else ()) + (
            ((SEEN_HERE, ()),) if v.collective_result else ()
        )
        if not own:
            continue
        others = dict.fromkeys(n for j, t in enumerate(throughs) if j != k for n in t)
        for names, needs in own:
            sources[(names, tuple(dict.fromkeys((*needs, *others))))] = None
    if not sources:
        return None
    return Agreement(tuple(sources)[-MAX_SOURCES:], tuple(through))


def call(names: Names, inputs) -> Agreement:
    """A project function's result: agreed if the function returns a collective's result,
    or if it is handed agreed values and returns what it computes from them."""
    own: Source = (names, ())
    handed = combine(inputs) if any(v.agreeing for v in inputs) else None
    if handed is None or len(handed.through) >= MAX_THROUGH:
        return Agreement((own,), (names,))
    sources = {(s, tuple(dict.fromkeys((*needs, names)))): None for s, needs in handed.sources}
    sources[own] = None  # the newest last: kept first when there are many
    return Agreement(tuple(sources)[-MAX_SOURCES:], (*handed.through, names))


def as_condition(a: Agreement | None) -> tuple[tuple[Source, ...], tuple[Names, ...]] | None:
    return None if a is None else (a.sources, a.through)


def returned(values) -> dict:
    """What a function's returned values are, for its callers (in any file): each one's
    sources (None: some returned value is not agreed), the calls they went through, and
    whether they hold nothing of the rank's own but what those calls return."""
    per_value: list[tuple[Source, ...]] | None = [] if values else None
    through: dict[Names, None] = {}
    for v in values:
        through.update(dict.fromkeys(_through(v)))
        a = combine([v])
        if a is None:
            per_value = None
        elif per_value is not None:
            per_value.append(a.sources)
    if len(through) > MAX_THROUGH:  # too many calls to vouch for: no claim
        return {"returns_clean": False, "returns_through": (), "returns_sources": None}
    return {
        "returns_clean": not any(v.tainted() or v.rank_tensor for v in values),
        "returns_through": tuple(through),
        "returns_sources": tuple(per_value) if per_value is not None else None,
    }
