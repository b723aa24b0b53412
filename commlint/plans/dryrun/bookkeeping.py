"""Integer tensors made of numbers know their values, up to 4 MiB: the program's bookkeeping.

Fake tensors know the value of a tensor of at most `SMALL_REAL` elements (a count, a flag):
what a real run computes from it is then computed here too. Bookkeeping tensors are often
larger and still cheap: accelerate's `copy_tensor_to_devices` sends a tensor's shape and
dtype code to the ranks that lack it in a 2^20-element `torch.int` buffer, sums it across
ranks, finds the non-zero entries and reads the dtype code back with `int()` — the code and
the shape then decide the dtype and size of the next all-reduce on those ranks, so without
their values the rank had to be recorded again with real tensors. Integer and boolean
tensors (never model data: weights, activations and gradients are floating point) of at most
`values.MAX_VALUE_BYTES` (4 MiB, the size up to which values travel between ranks) are
therefore computed with for real whenever every tensor they are made from knows its value:
made from numbers (`zeros`, `full`, `arange`, ...), from other known tensors, or delivered
by a collective whose every contribution is known. `torch.empty` of such a tensor holds
zeros, what a fresh allocation holds (the program reads memory it never wrote only by
accident or, as accelerate, counting on it); that assumption is noted in the trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch._subclasses.fake_tensor import unset_fake_temporarily

from commlint.plans.dryrun.values import MAX_VALUE_BYTES

# the factories whose memory is not written (`torch.empty`, `new_empty`, `empty_like`)
UNWRITTEN = frozenset({"empty", "new_empty", "empty_like"})
ASSUMED = "a tensor made with torch.empty and read before it was written holds zeros"


def fits(t: Any) -> bool:
    """An integer or boolean tensor of concrete size and at most 4 MiB."""
    dtype = getattr(t, "dtype", None)
    if dtype is None or dtype.is_floating_point or dtype.is_complex:
        return False
    if any(type(d) is not int for d in t.shape):
        return False
    return t.numel() * t.element_size() <= MAX_VALUE_BYTES


_told: list[bool] = []  # the assumption is sent once per rank process


def made(func: Any, args: tuple, kwargs: dict, out: Any, send: Callable[[Any], None]) -> Any:
    """The real value of a factory's result `out` (made of numbers only, small or
    bookkeeping): computed as a real run computes it, zeros for `torch.empty`; None for an
    `empty` that is model data (its memory stays unknown)."""
    unwritten = func._opname in UNWRITTEN
    if unwritten and not fits(out):
        return None
    with unset_fake_temporarily():
        value = func(*args, **kwargs)
        if unwritten:
            value.zero_()
    if unwritten and not _told:
        _told.append(True)
        send(("assume", ASSUMED))
    return value
