"""A rank's own view of the filesystem: the dry-run never changes a file of yours.

Every write, append, truncate, delete, rename and mkdir a rank makes, on any path (absolute,
relative, with `..`, inside the working folder or not), goes to the rank's copy-on-write view:
a file it writes is its own copy in the run's scratch folder; a file it removes, or a folder it
removes or renames, is gone for that rank only; a folder it makes exists for that rank only.
Reads of files it did not change stay real. A barrier hands what a rank wrote, removed and made
before it to the ranks waiting in it (`RecordingProcessGroup._side_effects`): "main process
first" works as in a real run, and a rank never sees another's files without a barrier between
them, however the ranks are scheduled on this machine.

Left as they are: the run's own scratch folder, and what is not a file of the user's (`/dev`,
`/proc`, `/sys`, a FIFO or a device opened by path). Code that writes without Python's `os`,
`io`, `shutil` or `pathlib` (a C extension) is caught by the OS layer when the machine allows it
(`overlay.py`); see docs/dryrun.md.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
import shutil
import stat as stat_module
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import torch

from commlint.plans.dryrun.recorder import Recorder

_WRITE_MODES = frozenset("wax+")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PSEUDO = ("/dev/", "/proc/", "/sys/")


def _dataset_caches() -> tuple[str, ...]:
    """Hugging Face `datasets`' cache: prepared Arrow files that pyarrow (C) writes and reads
    back under names Python renames them to — a cache the library regenerates, not the user's
    files. Left as it is, like the pseudo files: the view cannot follow C code there."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    hf_home = os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")
    roots = [os.path.join(hf_home, "datasets"), os.environ.get("HF_DATASETS_CACHE") or ""]
    return tuple(os.path.abspath(r).rstrip(os.sep) + os.sep for r in roots if r)


def _error(code: int, path: Any) -> OSError:
    return OSError(code, os.strerror(code), os.fsdecode(path))


class _Entry:
    """`os.scandir`'s entry for a folder of the rank's view."""

    def __init__(self, view: FileView, folder: str, name: str) -> None:
        self.name, self.path = name, os.path.join(folder, name)
        self._view = view

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._view.isdir(self.path)

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._view.isfile(self.path)

    def is_symlink(self) -> bool:
        return os.path.islink(self.path)

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        return self._view.stat(self.path, follow_symlinks=follow_symlinks)

    def inode(self) -> int:
        return self.stat().st_ino

    def __fspath__(self) -> str:
        return self.path


class _Listing:
    """`os.scandir`'s iterator (also a context manager)."""

    def __init__(self, entries: list[_Entry]) -> None:
        self._entries = iter(entries)

    def __iter__(self) -> _Listing:
        return self

    def __next__(self) -> _Entry:
        return next(self._entries)

    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def close(self) -> None:
        pass


class FileView:
    """One rank's view. Its state lives on the `Recorder` (`private`, `delivered`, `gone`,
    `dirs`, and what changed since the last barrier), which the barrier hands over."""

    def __init__(self, recorder: Recorder, scratch: str, real_folders: bool = False) -> None:
        self.rec = recorder
        self.scratch = os.path.realpath(scratch).rstrip(os.sep) + os.sep
        self.scratch_as_given = os.path.abspath(scratch).rstrip(os.sep) + os.sep
        # Under the OS layer a folder the rank makes is also made in its private overlay, so
        # code that writes into it from C finds it
        self.real_folders = real_folders
        self.caches = _dataset_caches()
        self.opaque: set[str] = set()  # folders removed, then made again: empty
        self.moved_dirs: dict[str, str] = {}  # a folder renamed: new path -> real old path
        self.copies: dict[str, tuple[bytes, str]] = {}  # handed-over content, its copy
        mask = os.umask(0)
        os.umask(mask)
        self.file_mode = 0o666 & ~mask
        self.real_open, self.real_os_open = builtins.open, os.open
        self.real_stat, self.real_listdir, self.real_mkdir = os.stat, os.listdir, os.mkdir
        self.real_scandir = os.scandir
        self.real = {
            name: getattr(os, name)
            for name in ("rename", "replace", "remove", "rmdir", "truncate", "chmod", "utime")
        }
        self.real["link"], self.real["symlink"] = os.link, os.symlink
        self.real_rmtree, self.real_access = shutil.rmtree, os.access

    # -- where things are -------------------------------------------------------------------

    def full(self, path: Any) -> str | None:
        """The absolute path, or None for a file descriptor or what is not a path."""
        if not isinstance(path, (str, bytes, os.PathLike)):
            return None
        with contextlib.suppress(Exception):
            return os.path.abspath(os.fsdecode(path))
        return None

    def passes(self, full: str) -> bool:
        """The run's own scratch and OS pseudo files: not the user's, left as they are."""
        if full.startswith((self.scratch, self.scratch_as_given)) or full.startswith(_PSEUDO):
            return True
        if full.startswith(self.caches) or full + os.sep in self.caches:
            return True
        mode = self._real_mode(full)
        return mode is not None and not (stat_module.S_ISREG(mode) or stat_module.S_ISDIR(mode))

    def _real_mode(self, path: str | None) -> int | None:
        if path is None:
            return None
        try:
            return self.real_stat(path).st_mode
        except (OSError, ValueError):
            return None

    def _hidden(self, full: str) -> bool:
        """The real file at `full` is not there for this rank: it, or a folder above it, was
        removed or renamed away, or a folder above it was removed and made again."""
        if not self.rec.gone and not self.opaque:
            return False
        path, first = full, True
        while True:
            if path in self.rec.gone or (not first and path in self.opaque):
                return True
            parent = os.path.dirname(path)
            if parent == path:
                return False
            path, first = parent, False

    def backing(self, full: str) -> str | None:
        """The real path this rank sees at `full` (a renamed folder's old one), or None."""
        if self._hidden(full):
            return None
        for new, old in self.moved_dirs.items():
            if full == new or full.startswith(new + os.sep):
                return old + full[len(new) :]
        return full

    def own(self, full: str) -> str | None:
        """Where the file this rank wrote or was handed at `full` is (a scratch copy)."""
        if full in self.rec.private:
            return self.rec.private[full]
        content = self.rec.delivered.get(full)
        if content is None:
            return None
        cached = self.copies.get(full)
        if cached is None or cached[0] is not content:  # a later barrier handed over more
            cached = self.copies[full] = (content, self._new_copy(content))
        return cached[1]

    def _new_copy(self, content: bytes = b"", source: str | None = None) -> str:
        fd, copy = tempfile.mkstemp(dir=self.scratch)
        os.fchmod(fd, self.file_mode)
        with self.real_open(fd, "wb") as fh:
            if source is not None:
                with self.real_open(source, "rb") as src:
                    shutil.copyfileobj(src, fh, 1 << 20)
                with contextlib.suppress(OSError):
                    os.fchmod(fh.fileno(), stat_module.S_IMODE(self.real_stat(source).st_mode))
            else:
                fh.write(content)
        return copy

    def _seen(self) -> set[str]:
        return (set(self.rec.private) | set(self.rec.delivered)) - self.rec.gone

    def _holds(self, full: str) -> bool:
        """A folder made by this rank, or one holding files only this rank sees."""
        if full in self.rec.dirs:
            return True
        prefix = full.rstrip(os.sep) + os.sep
        return any(f.startswith(prefix) for f in self._seen()) or any(
            d.startswith(prefix) for d in self.rec.dirs
        )

    def exists(self, path: Any) -> bool:
        full = self.full(path)
        if full is None or self.passes(full):
            return self._real_mode(path if full is None else full) is not None
        if full in self.rec.private or full in self.rec.delivered or self._holds(full):
            return True
        return self._real_mode(self.backing(full)) is not None

    def isfile(self, path: Any) -> bool:
        full = self.full(path)
        if full is not None and not self.passes(full):
            if full in self.rec.private or full in self.rec.delivered:
                return True
            if self._holds(full):
                return False
            path = self.backing(full)
        mode = self._real_mode(path)
        return mode is not None and stat_module.S_ISREG(mode)

    def isdir(self, path: Any) -> bool:
        full = self.full(path)
        if full is not None and not self.passes(full):
            if full in self.rec.private or full in self.rec.delivered:
                return False
            if self._holds(full):
                return True
            path = self.backing(full)
        mode = self._real_mode(path)
        return mode is not None and stat_module.S_ISDIR(mode)

    def _parent_is_dir(self, full: str) -> None:
        if not self.isdir(os.path.dirname(full)):
            raise _error(errno.ENOENT, full)

    # -- writing ----------------------------------------------------------------------------

    def own_copy(self, full: str, keep: bool) -> str:
        """This rank's own copy of a file it writes: with `keep` (appending, updating) it
        starts as the file this rank sees (the handed-over content, else the real file), so
        ranks that run side by side never interleave their lines in an order a real run
        cannot give (accelerate's `main_process_first` check)."""
        if full not in self.rec.private:
            source = self.backing(full) if keep and full not in self.rec.delivered else None
            if source is not None and self.isfile(full) and self._real_mode(source) is not None:
                self.rec.private[full] = self._new_copy(source=source)
            else:
                content = self.rec.delivered.get(full) if keep else None
                self.rec.private[full] = self._new_copy(content or b"")
        self.rec.gone.discard(full)
        self.rec.removed.discard(full)
        self.rec.written.add(full)
        return self.rec.private[full]

    def _for_writing(self, full: str, path: Any, create: bool, exclusive: bool) -> None:
        if self.isdir(full):
            raise _error(errno.EISDIR, path)
        exists = self.exists(full)
        if exclusive and exists:
            raise _error(errno.EEXIST, path)
        if not exists and not create:
            raise _error(errno.ENOENT, path)
        self._parent_is_dir(full)

    def open(self, file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        full = self.full(file)
        if full is None or self.passes(full) or k.get("opener") is not None:
            return self.real_open(file, mode, *a, **k)
        if isinstance(mode, str) and _WRITE_MODES.intersection(mode):
            self._for_writing(full, file, create="r" not in mode, exclusive="x" in mode)
            copy = self.own_copy(full, keep="a" in mode or "r" in mode)
            return self.real_open(copy, mode.replace("x", "w"), *a, **k)
        return self.real_open(self._readable(full, file), mode, *a, **k)

    def _readable(self, full: str, path: Any) -> str:
        where = self.own(full)
        if where is not None:
            return where
        if self._holds(full):
            raise _error(errno.EISDIR, path)
        real = self.backing(full)
        if real is None:
            raise _error(errno.ENOENT, path)
        return real

    def os_open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        full = self.full(path)
        if full is None or dir_fd is not None or self.passes(full):
            return self.real_os_open(path, flags, mode, dir_fd=dir_fd)
        if flags & _WRITE_FLAGS:
            excl = bool(flags & os.O_EXCL) and bool(flags & os.O_CREAT)
            self._for_writing(full, path, create=bool(flags & os.O_CREAT), exclusive=excl)
            copy = self.own_copy(full, keep=not flags & os.O_TRUNC)
            return self.real_os_open(copy, flags & ~(os.O_EXCL | os.O_CREAT), mode)
        if self._holds(full) and self.own(full) is None:
            return self.real_os_open(self.scratch, flags, mode)  # a folder only it sees
        return self.real_os_open(self._readable(full, path), flags, mode)

    def truncate(self, path: Any, length: int) -> None:
        full = self.full(path)
        if full is None or self.passes(full):
            return self.real["truncate"](path, length)
        self._for_writing(full, path, create=False, exclusive=False)
        self.real["truncate"](self.own_copy(full, keep=True), length)

    def remove(self, path: Any, *, dir_fd: Any = None) -> None:
        full = self.full(path)
        if full is None or dir_fd is not None or self.passes(full):
            return self.real["remove"](path, dir_fd=dir_fd)
        if self.isdir(full):
            raise _error(errno.EISDIR, path)
        if not self.exists(full):
            raise _error(errno.ENOENT, path)
        self._forget(full)

    def _forget(self, full: str) -> None:
        """`full` (and all under it) is gone for this rank: the real one stays on disk."""
        prefix = full + os.sep
        for table in (self.rec.private, self.rec.delivered):
            for p in [p for p in table if p == full or p.startswith(prefix)]:
                del table[p]
        self.rec.dirs -= {d for d in self.rec.dirs if d == full or d.startswith(prefix)}
        self.opaque -= {d for d in self.opaque if d == full or d.startswith(prefix)}
        for new in [n for n in self.moved_dirs if n == full or n.startswith(prefix)]:
            del self.moved_dirs[new]
        self.rec.written -= {w for w in self.rec.written if w == full or w.startswith(prefix)}
        self.rec.made -= {d for d in self.rec.made if d == full or d.startswith(prefix)}
        self.rec.gone.add(full)
        self.rec.removed.add(full)

    def rmdir(self, path: Any, *, dir_fd: Any = None) -> None:
        full = self.full(path)
        if full is None or dir_fd is not None or self.passes(full):
            return self.real["rmdir"](path, dir_fd=dir_fd)
        if not self.isdir(full):
            raise _error(errno.ENOTDIR if self.exists(full) else errno.ENOENT, path)
        if self.listdir(full):
            raise _error(errno.ENOTEMPTY, path)
        self._forget(full)

    def rmtree(self, path: Any, ignore_errors: bool = False, onerror: Any = None, **k: Any) -> None:
        full = self.full(path)
        if full is None or self.passes(full) or k.get("dir_fd") is not None:
            return self.real_rmtree(path, ignore_errors, onerror, **k)
        if not self.isdir(full):
            if ignore_errors:
                return
            code = errno.ENOTDIR if self.exists(full) else errno.ENOENT
            err = _error(code, path)
            if onerror is None:
                raise err
            onerror(os.open, path, (type(err), err, None))
            return
        self._forget(full)

    def mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: Any = None) -> None:
        full = self.full(path)
        if full is None or dir_fd is not None or self.passes(full):
            return self.real_mkdir(path, mode, dir_fd=dir_fd)
        if self.exists(full):
            raise _error(errno.EEXIST, path)
        self._parent_is_dir(full)
        if full in self.rec.gone or self._hidden(full):
            self.opaque.add(full)  # made again: what was on disk there is not in it
        self.rec.gone.discard(full)
        self.rec.removed.discard(full)
        self.rec.dirs.add(full)
        self.rec.made.add(full)
        if self.real_folders:  # the private overlay: C code can write into it
            with contextlib.suppress(OSError):
                self.real_mkdir(full, mode)

    def move(self, src: Any, dst: Any, real: Callable[..., Any], **k: Any) -> None:
        s, d = self.full(src), self.full(dst)
        if s is None or d is None or k or (self.passes(s) and self.passes(d)):
            return real(src, dst, **k)
        if self.passes(d):
            raise _error(errno.EXDEV, dst)  # out of the view onto a real path: refused
        if not self.passes(s) and not self.exists(s):
            raise _error(errno.ENOENT, src)
        if s == d:
            return
        is_dir = not self.passes(s) and self.isdir(s)
        if is_dir:
            if self.isfile(d):
                raise _error(errno.ENOTDIR, dst)
            if self.isdir(d) and self.listdir(d):
                raise _error(errno.ENOTEMPTY, dst)
            self._move_folder(s, d)
        else:
            if self.isdir(d):
                raise _error(errno.EISDIR, dst)
            self._parent_is_dir(d)
            copy = self.rec.private.pop(s, None)
            if copy is None:
                where = s if self.passes(s) else self.own(s) or self.backing(s)
                copy = self._new_copy(source=where)
            self._forget(d)
            self.rec.private[d] = copy
            if not self.passes(s):
                self._forget(s)
        self.rec.gone.discard(d)
        self.rec.removed.discard(d)
        (self.rec.made if is_dir else self.rec.written).add(d)

    def _move_folder(self, s: str, d: str) -> None:
        real = self.backing(s)
        moved = {
            name: {p: v for p, v in table.items() if p == s or p.startswith(s + os.sep)}
            for name, table in (("private", self.rec.private), ("delivered", self.rec.delivered))
        }
        dirs = {p for p in self.rec.dirs if p == s or p.startswith(s + os.sep)}
        opaque = {p for p in self.opaque if p == s or p.startswith(s + os.sep)}
        self._forget(d)
        self._forget(s)
        for name, table in (("private", self.rec.private), ("delivered", self.rec.delivered)):
            for p, v in moved[name].items():
                table[d + p[len(s) :]] = v
                self.rec.written.add(d + p[len(s) :])
        self.rec.dirs |= {d + p[len(s) :] for p in dirs} | {d}
        self.opaque |= {d + p[len(s) :] for p in opaque}
        if real is not None and self._real_mode(real) is not None:
            self.moved_dirs[d] = real
        else:
            self.opaque.add(d)

    def chmod(self, path: Any, mode: int, **k: Any) -> None:
        full = self.full(path)
        if full is None or k.get("dir_fd") is not None or self.passes(full):
            return self.real["chmod"](path, mode, **k)
        if not self.exists(full):
            raise _error(errno.ENOENT, path)
        if self.isfile(full):
            self.real["chmod"](self.own_copy(full, keep=True), mode)

    def utime(self, path: Any, *a: Any, **k: Any) -> None:
        full = self.full(path)
        if full is None or k.get("dir_fd") is not None or self.passes(full):
            return self.real["utime"](path, *a, **k)
        if not self.exists(full):
            raise _error(errno.ENOENT, path)
        if full in self.rec.private:
            self.real["utime"](self.rec.private[full], *a, **k)

    def link(self, src: Any, dst: Any, real: Callable[..., Any], **k: Any) -> None:
        """A link made by the rank: its own file at `dst` with what `src` holds."""
        s, d = self.full(src), self.full(dst)
        if s is None or d is None or k or self.passes(d):
            return real(src, dst, **k)
        if self.exists(d):
            raise _error(errno.EEXIST, dst)
        self._parent_is_dir(d)
        if real is self.real["symlink"]:
            s = os.path.join(os.path.dirname(d), os.fsdecode(src))
        with self.open(d, "wb") as out:
            if self.isfile(s):
                with self.open(s, "rb") as src_file:
                    shutil.copyfileobj(src_file, out)

    # -- reading ----------------------------------------------------------------------------

    def stat(self, path: Any, *, dir_fd: Any = None, follow_symlinks: bool = True) -> Any:
        full = self.full(path)
        if full is None or dir_fd is not None or self.passes(full):
            return self.real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
        where = self.own(full)
        if where is None and self._holds(full):
            real = self.backing(full)
            where = real if self._real_mode(real) is not None else self.scratch
        if where is None:
            where = self.backing(full)
            if where is None:
                raise _error(errno.ENOENT, path)
        return self.real_stat(where, follow_symlinks=follow_symlinks)

    def lstat(self, path: Any, *, dir_fd: Any = None) -> Any:
        return self.stat(path, dir_fd=dir_fd, follow_symlinks=False)

    def listdir(self, path: Any = ".") -> list[Any]:
        full = self.full(path)
        if full is None or self.passes(full):
            return self.real_listdir(path)
        if not self.isdir(full):
            raise _error(errno.ENOTDIR if self.exists(full) else errno.ENOENT, path)
        names = self._names(full)
        return sorted(names) if not isinstance(path, bytes) else [os.fsencode(n) for n in names]

    def _names(self, full: str) -> set[str]:
        real = self.backing(full)
        names: set[str] = set()
        if full not in self.opaque and self._real_mode(real) is not None:
            with contextlib.suppress(OSError):
                names = {
                    n for n in self.real_listdir(real) if not self._hidden(os.path.join(full, n))
                }
        prefix = full.rstrip(os.sep) + os.sep
        for f in self._seen() | self.rec.dirs:
            if f.startswith(prefix):
                names.add(f[len(prefix) :].split(os.sep, 1)[0])
        return names

    def _changed_under(self, full: str) -> bool:
        prefix = full.rstrip(os.sep) + os.sep
        paths = (
            *self.rec.private,
            *self.rec.delivered,
            *self.rec.gone,
            *self.rec.dirs,
            *self.opaque,
            *self.moved_dirs,
        )
        return self._hidden(full) or any(p.startswith(prefix) or p == full for p in paths)

    def scandir(self, path: Any = ".") -> Any:
        full = self.full(path)
        if full is None or isinstance(path, bytes) or self.passes(full):
            return self.real_scandir(path)
        if not self._changed_under(full) and self.backing(full) == full:
            return self.real_scandir(path)
        folder = os.fspath(path)
        return _Listing([_Entry(self, folder, n) for n in self.listdir(full)])

    def access(self, path: Any, mode: int, **k: Any) -> bool:
        """What the rank may do at `path`: a file or folder of its view it may read and
        write as the real one (its own: as the folder it is in)."""
        full = self.full(path)
        if full is None or k.get("dir_fd") is not None or self.passes(full):
            return self.real_access(path, mode, **k)
        if not self.exists(full):
            return False
        real = self.backing(full)
        while real is not None and self._real_mode(real) is None:
            real = os.path.dirname(real) if real != os.sep else None
        return real is None or self.real_access(real, mode)

    def xattr(self, real: Callable[..., Any], writes: bool) -> Callable[..., Any]:
        """Extended attributes: read where the rank's file is; written on its own copy only
        (shutil.copystat copies them onto the file it just wrote)."""

        def attr(path: Any, *a: Any, **k: Any) -> Any:
            full = self.full(path)
            if full is None or self.passes(full):
                return real(path, *a, **k)
            if writes:
                if full in self.rec.private:
                    return real(self.rec.private[full], *a, **k)
                return None
            if not self.exists(full):
                raise _error(errno.ENOENT, path)
            where = self.own(full) or self.backing(full)
            return real(where if self._real_mode(where) is not None else self.scratch, *a, **k)

        return attr

    # -- installing -------------------------------------------------------------------------

    def install(self) -> None:
        """Route Python's file functions through this view (in the rank's process only)."""
        sys.dont_write_bytecode = True  # what the rank imports leaves no __pycache__ behind
        builtins.open = io.open = self.open  # type: ignore[assignment]
        os.open = self.os_open  # type: ignore[assignment]
        os.rename = lambda src, dst, **k: self.move(src, dst, self.real["rename"], **k)
        os.replace = lambda src, dst, **k: self.move(src, dst, self.real["replace"], **k)
        os.remove = os.unlink = self.remove  # type: ignore[assignment]
        os.rmdir, os.mkdir = self.rmdir, self.mkdir  # type: ignore[assignment]
        os.truncate = self.truncate  # type: ignore[assignment]
        os.chmod, os.utime = self.chmod, self.utime  # type: ignore[assignment]
        os.link = lambda src, dst, **k: self.link(src, dst, self.real["link"], **k)
        os.symlink = lambda src, dst, *a, **k: self.link(src, dst, self.real["symlink"], **k)
        os.stat, os.lstat = self.stat, self.lstat  # type: ignore[assignment]
        os.listdir, os.scandir = self.listdir, self.scandir  # type: ignore[assignment]
        os.path.exists, os.path.isfile, os.path.isdir = self.exists, self.isfile, self.isdir
        os.path.lexists = self.exists
        shutil.rmtree = self.rmtree  # type: ignore[assignment]
        os.access = self.access  # type: ignore[assignment]
        for name, writes in (("listxattr", False), ("getxattr", False), ("setxattr", True)):
            if hasattr(os, name):
                setattr(os, name, self.xattr(getattr(os, name), writes))
        if hasattr(os, "removexattr"):
            os.removexattr = self.xattr(os.removexattr, True)
        save = torch.save

        def save_through_open(obj: Any, f: Any, *a: Any, **k: Any) -> None:
            # torch.save opens a path in C++: through Python's open, it is a write like others
            if isinstance(f, (str, os.PathLike)):
                with self.open(f, "wb") as fh:
                    return save(obj, fh, *a, **k)
            return save(obj, f, *a, **k)

        torch.save = save_through_open
