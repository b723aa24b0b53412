"""A recorded call's ring entry, made from a template once per kind of call and line.

A training step makes the same calls from the same lines with the same shapes every time.
What the ring entry of such a call says — op, group, shape, dtype, root, reduce op, the user's
line and frames, the framework frame, the label, the stream it belongs to — and its
fingerprint's name (`Guard.fp_record`) are therefore worked out once per (what the call
passed, chain of frames that name it) and kept as a template; each call copies the template
(one C-level dict copy) and adds what is its own: the state, an async op's handle, the
backward() it runs in, the thread. The entry is the one `Guard.entry` and `_place` build (a
test compares the two).

Inside a 4-rank FSDP2 job on 2 shared cores, building the entry key by key and formatting
the fingerprint's key cost about 16 and 20 us of the program's thread per call (2026-11-27):
the guard's code and data are cold between FSDP2's tensor operations.
"""

from __future__ import annotations

from threading import current_thread, get_ident
from typing import Any

from commlint.callsites import call_site_memo_at, site_still_known
from commlint.guard.answers import collective_fp
from commlint.guard.frames import short_path
from commlint.guard.ring import PENDING

TEMPLATES_KEPT = 4096  # templates per rank; dropped all at once past this (then made again)
_PER_CALL = ("state", "bwd", "thread", "handle")  # what each call adds to its copy


def record(guard: Any, call: Any, api: str, frame: Any) -> tuple[dict[str, Any], str, int | None]:
    """The ring entry of `call` (made through `api`, from `frame` outward), its stream and the
    int naming its collective fingerprint (None: p2p, or not compared)."""
    site_key, known = call_site_memo_at(frame, short_path, 4)
    key = _template_key(call, api, site_key)
    try:
        cached = guard.templates.get(key) if key is not None else None
    except TypeError:  # a shape of symbols (tracing): made each time
        key = cached = None
    if cached is None or not site_still_known(site_key, cached[3]):
        cached = _make(guard, call, api, known)
        if key is not None:
            if len(guard.templates) >= TEMPLATES_KEPT:
                guard.templates.clear()
            guard.templates[key] = cached
    template, stream, kid, _ = cached
    e = template.copy()
    e["state"] = PENDING
    if call.is_async:
        ring = guard.ring
        e["handle"] = ring.new_handle()
        if ring.backward_since is not None:
            e["bwd"] = ring.backward_id
    if get_ident() != guard.main_thread:
        e["thread"] = current_thread().name
    return e, stream, kid


def _template_key(call: Any, api: str, site_key: tuple) -> tuple | None:
    """What decides a call's template (None: not kept — all_to_all counts, which change)."""
    if call.in_splits is not None:
        return None
    t = call.tensor
    shape = dtype = None
    if t is not None and hasattr(t, "shape"):
        shape, dtype = t.shape, t.dtype
    group = call.group
    key = (api, None if group is None else id(group), shape, dtype, call.root, call.reduce_op)
    return (*key, call.is_async, call.p2p, call.tag, call.obj, site_key)


def _make(guard: Any, call: Any, api: str, known: tuple) -> tuple:
    e, stream = guard.entry(call)
    for k in _PER_CALL:
        e.pop(k, None)
    where = known[1]
    if where.site:
        e["site"] = where.site
    if where.stack:
        e["stack"] = list(where.stack)
    if where.via:
        e["via"] = where.via
    if api != e["op"]:
        e["label"] = api
    kid = None
    if not call.p2p and not e.get("nonmember"):
        kid = guard.fp_record(e["group"], collective_fp(e, call.obj))[3]
    return e, stream, kid, known
