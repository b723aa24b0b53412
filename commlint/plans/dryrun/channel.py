"""A rank's channel to the parent: its messages, and its questions for values peers send now."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any


class PipeSend:
    """The rank's `conn.send`, shared (never copied) by `copy.deepcopy` of anything that
    reaches it: a copied Connection closes the real pipe when it is collected.

    One message at a time: a `Connection.send` of a large message is several writes, and two
    threads of the rank (a worker thread that communicates on a side group) would interleave
    their bytes — a stream the parent cannot unpickle. Under the lock each thread's messages
    reach the parent whole and in that thread's order."""

    def __init__(self, conn: Any) -> None:
        self._send = conn.send
        self._lock = threading.Lock()
        # a process forked while another thread held the lock must not inherit it held
        os.register_at_fork(after_in_child=self._unlock)

    def _unlock(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, msg: Any) -> None:
        with self._lock:
            self._send(msg)

    def __copy__(self) -> PipeSend:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> PipeSend:
        return self


class Live:
    """Values peers send in this very pass, asked of the parent when a receive needs them:
    with every rank running at once, a rank gets what its peers send now (as in a real
    run), not what they sent in the previous pass, so a chain of values over many steps
    settles in one pass instead of one pass per step. The parent answers with what it has
    once every sender has sent it, has ended, or every running rank waits (a peer that will
    not send it: the previous pass's value, as without this). Shared, never copied, by
    `copy.deepcopy` (as `PipeSend`)."""

    def __init__(self, send: Callable[[Any], None], replies: Any, timeout: float) -> None:
        self._send, self._replies, self._timeout = send, replies, timeout
        self._pid = os.getpid()

    def __call__(self, key: Any, senders: list[int]) -> dict[int, Any] | None:
        if threading.current_thread() is not threading.main_thread() or os.getpid() != self._pid:
            return None  # one question at a time: the main thread's (not a helper process's)
        self._send(("want", key, senders))
        # the parent answers once the senders sent, or ended, or every rank waits: however
        # long a busy machine makes that (a rank that waits for its peers is not stuck)
        try:
            return self._replies.recv()
        except EOFError:
            return None

    def __copy__(self) -> Live:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Live:
        return self
