"""The one gate every input passes before a reader parses it.

A reader asks `read_input` for a file's bytes instead of opening it: only a regular file is
read (a FIFO would block forever, `/dev/zero` never ends, a socket or a tty has side
effects), and never more than `MAX_INPUT_BYTES`, so a reader's memory is bounded by a
multiple of what it was given. `inside` says whether a path a plan names stays within the
folders the user allowed. The checks cost a `stat` per file, never a pass over the data.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from commlint.findings import CommlintInputError

# Largest file any reader takes (a 1,048,576-action JSON plan is 52 MB; a Flight Recorder
# folder of 256 × 2,000 entries is about 1 GB in all, a few MB per rank).
MAX_INPUT_BYTES = 1 << 30
# Files a plan names (a pipeline schedule CSV): a schedule of 10⁵ cells is about 1 MB.
MAX_NAMED_BYTES = 64 << 20


def kind_problem(mode: int) -> str | None:
    """Why a file of this `st_mode` is not read, else None."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "not a regular file (a FIFO): not read"
    if stat.S_ISSOCK(mode):
        return "not a regular file (a socket): not read"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "not a regular file (a device): not read"
    return "not a regular file: not read"


def is_regular(path: str | Path) -> bool:
    """True for a regular file (following symbolic links); never opens it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_input(path: str | Path, limit: int | None = None, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `limit` bytes, else a located error.

    Opened without blocking and checked on the open descriptor (a path swapped for a FIFO
    between a check and the open is still refused); read up to `limit` + 1 bytes whatever the
    size says (`/proc` files report 0). `limit` defaults to `MAX_INPUT_BYTES`."""
    name = str(path)
    limit = MAX_INPUT_BYTES if limit is None else limit
    try:
        before = os.stat(path)
    except (OSError, ValueError) as exc:
        raise CommlintInputError(f"cannot read: {_why(exc)}", name) from None
    problem = kind_problem(before.st_mode)
    if problem:
        raise CommlintInputError(problem, name)
    if before.st_size > limit:
        raise CommlintInputError(_too_big(before.st_size, limit, what), name)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise CommlintInputError(f"cannot read: {_why(exc)}", name) from None
    try:
        problem = kind_problem(os.fstat(fd).st_mode)
        if problem:
            raise CommlintInputError(problem, name)
        chunks = []
        left = limit + 1
        want = min(left, before.st_size + 1)  # one read, one copy, for a file that holds still
        while left > 0:
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
            want = min(left, 1 << 24)
    except OSError as exc:
        raise CommlintInputError(f"cannot read: {_why(exc)}", name) from None
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > limit:
        raise CommlintInputError(_too_big(len(data), limit, what), name)
    return data


def read_text(
    path: str | Path, limit: int | None = None, what: str = "file", quote: bool = True
) -> str:
    """`read_input` decoded as UTF-8; a bad byte is a located error naming its offset (and
    the byte itself when `quote`: never for a file a plan names, whose text stays unshown)."""
    raw = read_input(path, limit, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        shown = f": {raw[exc.start : exc.start + 1]!r}" if quote else ""
        raise CommlintInputError(f"not UTF-8 (byte {exc.start}{shown})", str(path)) from None


def named_file(value: str, plan_path: str | None, allowed: Iterable[str] = ()) -> Path:
    """The file a plan names: relative to the plan's folder (the working folder for a plan
    given as text), and within that folder or one of `allowed` once symbolic links are
    resolved — so a plan reads plan data only, never `/etc/passwd` or `/proc/self/environ`.
    Raises `CommlintInputError` (no path: the caller locates it in the plan)."""
    base = Path(plan_path).parent if plan_path else Path.cwd()
    given = Path(value)
    path = given if given.is_absolute() else base / given
    folders = [base, *(Path(a) for a in allowed)]
    if not inside(path, folders):
        if not os.path.lexists(path):
            raise CommlintInputError(f"{value!r}: no such file")
        where = "the plan's folder" + (" or an --allow-path folder" if allowed else "")
        raise CommlintInputError(
            f"{value!r} is outside {where}: not read (a plan names files beside it; "
            "pass `commlint plan --allow-path DIR` to allow another folder)"
        )
    return path


def inside(path: Path, folders: Iterable[Path]) -> bool:
    """True when `path`, symbolic links resolved, lies within one of `folders` (resolved)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    for folder in folders:
        try:
            if real.is_relative_to(folder.resolve()):
                return True
        except (OSError, RuntimeError):
            continue
    return False


@contextmanager
def memory_budget(nbytes: int) -> Iterator[None]:
    """Let the code inside grow this process's address space by at most `nbytes`: past it an
    allocation fails with `MemoryError` (which the caller turns into a located error) instead
    of growing to what a few hostile bytes ask for — a 9-byte pickle whose memo index asks the
    C unpickler for gigabytes. Linux only (elsewhere nothing is limited); the limit is the
    process's, for the block's duration, so it is only for single-threaded readers."""
    try:
        import resource

        with open("/proc/self/statm", "rb") as fh:
            used = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError, IndexError):
        yield
        return
    cap = used + nbytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield  # a tighter limit is already in force
        return
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextmanager
def numbers_located(where: str, what: str = "a Flight Recorder dump") -> Iterator[None]:
    """An integer too long for Python to write out (a pickle's LONG4 of thousands of digits in
    a size, a sequence number, a line) met inside the block is a located error naming `where`,
    not an internal one."""
    try:
        yield
    except ValueError as exc:
        if "Exceeds the limit" not in str(exc):
            raise
        raise CommlintInputError(
            f"holds an integer of more than {sys.get_int_max_str_digits()} digits: not {what}",
            where,
        ) from None


def _too_big(size: int, limit: int, what: str) -> str:
    return f"{what} of {size:,} bytes or more is larger than the {limit:,}-byte limit: not read"


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__
