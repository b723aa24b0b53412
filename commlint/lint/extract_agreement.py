"""Values that a collective made the same on every rank, followed through what the program
computes from them.

`dist.broadcast(t)` makes `t` the same on every member; so is `t[:, -1].argmax(-1)`, and
so are flags a helper computes from it (`done = update(done, tokens)`), and `torch.all` of
them: a loop that leaves on such a flag leaves on every rank together. Whether a project
function returns a collective's result, or only what it computes from its arguments, is
known only once every file is extracted, so a value carries the question (`Agreement`) and
the analysis answers it (`Program.agreed`):

- its *sources*: project calls whose result may be a collective's (`()`: one seen here);
- the calls it went *through*: project calls whose results it was computed from, each of
  which must return nothing of the rank's own (no rank, no data read, no rank tensor).

It is the same on every rank when one source returns a collective's result and every call
it went through is clean. What the caller handed in, attributes and constants do not undo
the agreement: the linter takes, as it does for the rank, that a caller hands every rank
the same arguments (an argument read on its own, `loss.item()`, stays this rank's data).
"""

from __future__ import annotations

from dataclasses import dataclass

Names = tuple[str, ...]  # a call's candidate qualified names, best first
SEEN_HERE: Names = ()  # a collective's result in this file: a source without a question
MAX_SOURCES = 32
MAX_THROUGH = 96  # beyond this many calls to vouch for, the agreement is not claimed


@dataclass(frozen=True)
class Agreement:
    sources: tuple[Names, ...]
    through: tuple[Names, ...] = ()

    @property
    def settled(self) -> bool:
        """Agreed with nothing left to ask: a collective's result, through no project call."""
        return SEEN_HERE in self.sources and not self.through


def _add(out: list[Names], names) -> None:
    for n in names:
        if n not in out:
            out.append(n)


def combine(vals) -> Agreement | None:
    """A value computed from `vals` (`a + b`, `t[i]`, `f(a, b)` of a library): agreed when
    one of them is and none of the others holds anything of the rank's own."""
    sources: list[Names] = []
    through: list[Names] = []
    for v in vals:
        if v.rank_tensor or (v.tainted() and not v.agreeing):
            return None
        if v.collective_result:
            _add(sources, [SEEN_HERE])
        if v.agreed is not None:
            _add(sources, v.agreed.sources)
            _add(through, v.agreed.through)
        else:
            _add(through, ((d,) for d in v.deps))
    if not sources or len(through) > MAX_THROUGH:
        return None
    return Agreement(tuple(sources[-MAX_SOURCES:]), tuple(through))


def call(names: Names, inputs) -> Agreement:
    """A project function's result: agreed if the function returns a collective's result,
    or if it is handed agreed values and returns what it computes from them."""
    handed = combine(inputs) if any(v.agreeing for v in inputs) else None
    if handed is None:
        return Agreement((names,), (names,))
    sources = list(handed.sources)
    through = list(handed.through)
    _add(sources, [names])
    _add(through, [names])
    if len(through) > MAX_THROUGH:
        return Agreement((names,), (names,))
    return Agreement(tuple(sources[-MAX_SOURCES:]), tuple(through))


def as_condition(a: Agreement | None) -> tuple[tuple[Names, ...], tuple[Names, ...]] | None:
    return None if a is None else (a.sources, a.through)


def returned(values) -> dict:
    """What a function's returned values are, for its callers (in any file): each one's
    sources (None: some returned value is not agreed), the calls they went through, and
    whether they hold nothing of the rank's own but what those calls return."""
    per_value: list[tuple[Names, ...]] | None = [] if values else None
    through: list[Names] = []
    for v in values:
        a = combine([v])
        if a is None:
            per_value = None
        else:
            if per_value is not None:
                per_value.append(a.sources)
            _add(through, a.through)
        if v.agreed is None:
            _add(through, ((d,) for d in v.deps))
    return {
        "returns_clean": not any(v.tainted() or v.rank_tensor for v in values),
        "returns_through": tuple(through[:MAX_THROUGH]),
        "returns_sources": tuple(per_value) if per_value is not None else None,
    }
