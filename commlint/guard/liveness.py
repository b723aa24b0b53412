"""What a rank is doing when it is not blocked in a communication call, and what became of a
rank that stopped answering.

A rank outside communication is "running": its main thread's Python stack (read by the
watchdog thread through `sys._current_frames`, as faulthandler would print it) says where.
A rank whose heartbeat stopped without an exit record is looked up in `/proc` when it runs on
the same host as the coordinator: stopped (SIGSTOP, a debugger), a zombie with its exit
status, or gone.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from typing import Any


def main_thread_stack(limit: int = 4) -> list[str]:
    """Where the main thread is now, innermost first: the program's own frames (not an
    installed package's, torch's, commlint's or the standard library's, as
    `commlint.callsites` tells them), `path:line in function`."""
    from commlint.callsites import user_call_site
    from commlint.guard.frames import _outward, short_path

    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    return user_call_site(_outward(frame), short_path, depth=limit).stack


def identity() -> dict[str, Any]:
    """What the coordinator needs to look this process up: its pid and host."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def silent_rank(info: dict[str, Any] | None) -> tuple[str, str]:
    """(status, words) of a rank with no heartbeat and no exit record: `stopped` (its process
    is stopped: SIGSTOP, a debugger) or `dead` (exited with signal N / code N, or gone)."""
    unknown = (
        "dead",
        "exited without recording how: its heartbeat stopped (killed by a signal, or crashed "
        "in native code)",
    )
    if not info or info.get("host") != socket.gethostname():
        return unknown
    try:
        with open(f"/proc/{int(info['pid'])}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except (OSError, ValueError):
        return unknown
    state = fields[0] if fields else "?"
    if state in ("T", "t"):
        return "stopped", "stopped (SIGSTOP or a debugger): it makes no progress until continued"
    if state in ("Z", "X") and len(fields) > 49:
        status = int(fields[49])
        if status & 0x7F:
            n = status & 0x7F
            return "dead", f"exited with signal {n} ({_signal_name(n)})"
        return "dead", f"exited with code {(status >> 8) & 0xFF}"
    if state in ("R", "S", "D"):
        return "running", "alive, but its guard does not answer (native code holding the GIL?)"
    return unknown
