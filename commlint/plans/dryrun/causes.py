"""Why a rank raised under fake tensors: a limit of fake tensors (record it again with real
ones, within the budget) or the program's own exception (nothing more to compute)."""

from __future__ import annotations

import dis
import os

from commlint.plans.dryrun.sites import is_user_file

# Exceptions that mean "fake tensors cannot answer this", not "the program is wrong".
FAKE_LIMITS = (
    "DataDependentOutputException",
    "UnreadValueSteers",
    "DynamicOutputShapeException",
    "UnsupportedOperatorException",
    "UnsupportedFakeTensorException",
    # a data-dependent size (an unbacked symbol) tested, or given where a number is needed
    "GuardOnDataDependentSymNode",
    "PendingUnbackedSymbolNotFound",
    "DataDependentSize",
)


def own(exc: BaseException) -> bool:
    """An exception no tensor could have caused: a missing module or name, an attribute a
    module lacks (torchtitan 0.3.0 calls `torch.distributed.set_timeout`, which torch 2.13
    does not have), or any exception the fake tensors had no part in (`_no_tensor_caused`).
    A real run raises it too: no need to see whether real tensors do."""
    if isinstance(exc, (ImportError, NameError, SyntaxError)):
        return True
    if isinstance(exc, AttributeError) and str(exc).startswith("module '"):
        return True
    return _raised_by_the_program(exc) or _no_tensor_caused(exc)


# where fake tensors compute (an operation on a fake tensor always runs through the mode's
# `__torch_dispatch__`): an exception raised under it may be theirs, not the program's
_FAKE_MACHINERY = os.path.join("torch", "_subclasses", "")
# words of the errors fake tensors raise outside it (a storage or data pointer they lack)
_FAKE_WORDS = ("fake", "meta", "storage", "data_ptr", "data pointer", "unread")


def _no_tensor_caused(exc: BaseException) -> bool:
    """An exception raised with no fake tensor operation on its way and no fake tensor in
    its words, nor in any exception it was raised from or while handling: the program's
    own decision on facts the dry-run has exactly — its configuration, the environment, a
    tensor's shape, dtype or device (Lightning refusing FSDP on a CPU accelerator, accelerate's
    `KeyError`, torch's "Torch not compiled with CUDA enabled" on a CPU target). A value fake
    tensors did not compute never decides silently: testing one stops the rank first
    (`unread.py`, `flow.py`), a fake-tensor limit the program caught is noted (`_RAISED`)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if type(e).__name__ in FAKE_LIMITS:
            return False
        text = str(e).lower()
        if any(word in text for word in _FAKE_WORDS):
            return False
        tb = e.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_name == "__torch_dispatch__" or _FAKE_MACHINERY in code.co_filename:
                return False
            tb = tb.tb_next
        todo += [e.__cause__, e.__context__]
    return True


_RAISE = dis.opmap["RAISE_VARARGS"]


def _raised_by_the_program(exc: BaseException) -> bool:
    """A `raise` (or `assert`) statement of the user's own file, not while handling another
    exception: its condition was computed from values the dry-run has (a fake tensor's value
    is never tested silently: a test stops the rank, `unread.py`), so real tensors would
    raise it too. Not an error raised by an operation (`1 / n` of a placeholder count)."""
    if exc.__cause__ is not None or exc.__context__ is not None:
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or not is_user_file(tb.tb_frame.f_code.co_filename):
        return False
    code = tb.tb_frame.f_code.co_code
    return 0 <= tb.tb_lasti < len(code) and code[tb.tb_lasti] == _RAISE
