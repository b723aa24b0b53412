"""`call_site_at`, the runtime guard's memoized call-site namer, names every call as the
unmemoized `user_call_site` does: per line, through a framework frame, after `USER_PROGRAMS`
changes, and without sharing a stack list between calls."""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from commlint import callsites
from commlint.callsites import USER_PROGRAMS, call_site_at, user_call_site

_FRAMEWORK_FILE = os.path.join(os.sep, "opt", "site-packages", "fwk", "loop.py")
_TORCH_FILE = callsites._torch_dir() + "fake_dist.py"


def _compiled(source: str, filename: str, namespace: dict[str, Any]) -> None:
    exec(compile(source, filename, "exec"), namespace)


# torch's frames (a fake file under torch's folder) and a framework's (under site-packages)
_ns: dict[str, Any] = {}
_compiled("import sys\ndef collective(depth):\n    return sys._getframe(depth)\n", _TORCH_FILE, _ns)
_fw: dict[str, Any] = {"collective": _ns["collective"]}
_compiled(
    "def barrier():\n    return collective(1)\n\ndef direct():\n    return collective(0)\n",
    _FRAMEWORK_FILE,
    _fw,
)


def _frames(frame: Any) -> Any:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _both(frame: Any) -> tuple[Any, Any]:
    return call_site_at(frame, depth=3), user_call_site(_frames(frame), depth=3)


def _line_a() -> Any:
    return _fw["barrier"]()


def _line_b(second: bool = False) -> Any:
    if second:
        return _fw["barrier"]()
    return _fw["barrier"]()


def test_memo_names_each_line_as_the_walk_does() -> None:
    seen = set()
    for _ in range(3):  # the second and third rounds are answered from the memo
        for make in (_line_a, _line_b, functools.partial(_line_b, True)):
            memo, walked = _both(make())
            assert memo == walked
            assert memo.via == "fwk/loop.py:2 in barrier"
            seen.add(memo.site)
        # the same function, another line: a separate call site
        for frame in (_fw["direct"](), sys._getframe()):
            memo, walked = _both(frame)
            assert memo == walked
            seen.add(memo.site)
    here = os.path.basename(__file__)
    assert len(seen) == 4 and all(s and here in s for s in seen)


def test_memo_drops_its_names_when_user_programs_change() -> None:
    # (the frames outward from `frame` are live: this test's own line moves on, so each
    # comparison is made from one line, in `_both`)
    frame = _line_a()
    memo, walked = _both(frame)
    assert memo == walked and memo.via == "fwk/loop.py:2 in barrier"
    USER_PROGRAMS.add(_FRAMEWORK_FILE)  # the framework's file is the user's program now
    try:
        memo, walked = _both(frame)
        assert memo == walked
        assert memo.site == f"{_FRAMEWORK_FILE}:2" and memo.via is None
    finally:
        USER_PROGRAMS.discard(_FRAMEWORK_FILE)
    memo, walked = _both(frame)
    assert memo == walked and memo.via == "fwk/loop.py:2 in barrier"


def test_memo_hands_out_a_fresh_stack_each_call() -> None:
    frame = _line_b()
    for _ in range(2):
        memo, walked = _both(frame)
        assert memo.stack and memo == walked
        memo.stack.clear()  # a caller that edits its entry's stack
