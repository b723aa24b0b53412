"""Whose code a stack frame is: the user's program, an installed framework, or neither.

The dry-run's recorder and the runtime guard both name a call by the innermost frame of the
*user's* program — not an installed package (anything under a `site-packages` or
`dist-packages` folder, wherever that folder is), not the standard library, not torch, not
commlint — and keep the innermost installed-package frame between that line and torch as
context (`Action.via`: the framework code that made the call for the user). One classifier
serves both, so they name the same line for the same call. No torch import here: the front
ends pass their frames in.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, NamedTuple

Kind = Literal["user", "framework", "torch", "commlint", "stdlib", "internal"]

_PACKAGE_FOLDERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
PACKAGE_FOLDERS = _PACKAGE_FOLDERS
_COMMLINT_DIR = str(Path(__file__).resolve().parent) + os.sep
_COMMLINT_DIR_AS_GIVEN = str(Path(__file__).parent) + os.sep
# Files that only wrap the function they decorate (`@deprecated`, `functools.wraps`): a
# framework frame there is not the framework's call, the one outside it is.
_DECORATOR_FILES = (
    "typing_extensions.py",
    "decorator.py",
    os.path.join("deprecated", "classic.py"),
)

# Programs that are the user's even when they live among installed packages (a framework's
# own example or test script run by `commlint run` or the guard).
USER_PROGRAMS: set[str] = set()
# Folders of installed packages that are the program: `commlint run -m torchtitan.train` runs
# torchtitan itself, so its frames are the user's (an error inside it is located at its line,
# not at `train.py`'s call of `main()`).
USER_PACKAGES: list[str] = []


def claim_program_package(module: str) -> None:
    """`-m pkg.mod`: the installed package `pkg` is the program, not a framework under it."""
    top = module.partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        for path in {str(Path(folder)) + os.sep, str(Path(folder).resolve()) + os.sep}:
            if any(f in path for f in _PACKAGE_FOLDERS) and path not in USER_PACKAGES:
                USER_PACKAGES.append(path)


@functools.cache
def _torch_dir() -> str:
    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return (str(Path(locations[0])) + os.sep) if locations else "\0"


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({str(Path(paths[k])) + os.sep for k in ("stdlib", "platstdlib") if paths.get(k)})


@functools.lru_cache(maxsize=8192)
def _kind(filename: str) -> Kind:
    if filename.startswith("<"):
        return "internal"  # <frozen runpy>, <string>, generated code
    if filename.startswith(_torch_dir()):
        return "torch"
    if filename.startswith((_COMMLINT_DIR, _COMMLINT_DIR_AS_GIVEN)):
        return "commlint"
    if any(folder in filename for folder in _PACKAGE_FOLDERS):
        return "framework"
    if filename.startswith(_stdlib_dirs()):
        return "stdlib"
    return "user"


def frame_kind(filename: str) -> Kind:
    """Whose code `filename` is (a frame's `f_code.co_filename`)."""
    if filename in USER_PROGRAMS:
        return "user"
    kind = _kind(filename)
    if kind == "framework" and USER_PACKAGES and filename.startswith(tuple(USER_PACKAGES)):
        return "user"
    return kind


def is_user_file(filename: str) -> bool:
    """A frame of the user's program: not an installed package, the standard library,
    torch or commlint."""
    return frame_kind(filename) == "user"


def package_path(filename: str) -> str:
    """An installed package's file as its import path shows it: the part after the last
    `site-packages` / `dist-packages` folder (`lightning/fabric/utilities/distributed.py`)."""
    best, width = -1, 0
    for folder in _PACKAGE_FOLDERS:
        at = filename.rfind(folder)
        if at > best:
            best, width = at, len(folder)
    return filename if best < 0 else filename[best + width :]


def framework_frame(frames: Iterable[Any]) -> str | None:
    """The innermost installed-package frame (not torch) between the user's innermost frame
    and torch's — the framework code that made the call for the user (Lightning's strategy
    barrier, accelerate's gather) — as `package/path.py:line in function`; None when the
    user's own code called torch."""
    for f in frames:
        role = _role(f.f_code.co_filename)
        if role == _USER:
            return None
        if role == _MAKER:
            return _framework_name(f)
    return None


class CallSite(NamedTuple):
    """Where a call was made, as both front ends record it."""

    site: str | None  # the user's innermost frame, `file:line`
    stack: list[str]  # the user's frames, innermost first, `file:line in function`
    via: str | None  # the framework frame that made the call, when one did


# A frame's role in naming a call, by its file: the user's, a framework frame that may have
# made the call (`framework_frame`), or neither (torch, commlint, the standard library, an
# installed decorator's wrapper). Cached per file name and dropped when `USER_PROGRAMS` changes.
_OTHER, _USER, _MAKER = 0, 1, 2
_ROLES: dict[str, int] = {}
_ROLES_FOR: frozenset[str] = frozenset()


def _programs_checked() -> None:
    """Drop the cached roles and call sites when `USER_PROGRAMS` changed."""
    global _ROLES_FOR
    if USER_PROGRAMS != _ROLES_FOR:
        _ROLES.clear()
        _SITES.clear()
        _ROLES_FOR = frozenset(USER_PROGRAMS)


def _role(filename: str) -> int:
    _programs_checked()
    role = _ROLES.get(filename)
    if role is None:
        kind = frame_kind(filename)
        role = _OTHER
        if kind == "user":
            role = _USER
        elif kind == "framework" and not (
            filename.endswith(_DECORATOR_FILES) or os.sep + "wrapt" + os.sep in filename
        ):
            role = _MAKER
        _ROLES[filename] = role
    return role


def _framework_name(f: Any) -> str:
    return f"{package_path(f.f_code.co_filename)}:{f.f_lineno} in {f.f_code.co_name}"


def user_call_site(frames: Iterable[Any], short_path: Any = None, depth: int = 6) -> CallSite:
    """The user's frames of a stack (`frames` innermost first, frame objects), at most
    `depth` of them, named by `short_path(filename)` (as given when None), and the framework
    frame that made the call. Frames of the standard library, torch and commlint are left out
    of the stack: they are the same for every call. One pass over the frames, which stops at
    the `depth`-th user frame."""
    name_of = short_path or (lambda f: f)
    _programs_checked()
    roles = _ROLES
    site = None
    via = None
    stack: list[str] = []
    for f in frames:
        code = f.f_code
        role = roles.get(code.co_filename)
        if role is None:
            role = _role(code.co_filename)
        if role == _MAKER and site is None and via is None:
            via = _framework_name(f)
        if role != _USER:
            continue
        entry = f"{name_of(code.co_filename)}:{f.f_lineno}"
        if site is None:
            site = entry
        stack.append(f"{entry} in {code.co_name}")
        if len(stack) >= depth:
            break
    return CallSite(site, stack, via if site is not None else None)


# `call_site_at`'s memo: (short_path, depth, the framework frame's code id and line, then each
# user frame's code id and line) -> (the code objects, which keep those ids theirs, CallSite)
_SITES: dict[tuple, tuple[tuple, CallSite]] = {}
_SITES_MAX = 4096


def call_site_at(frame: Any, short_path: Any = None, depth: int = 6) -> CallSite:
    """`user_call_site` of the stack outward from `frame`, memoized per chain of (code object,
    line) of the frames that name the call: the runtime guard names every call it records,
    and a training step makes the same calls from the same lines each time. The walk reads
    only each frame's file (its role is cached per file) and stops at the `depth`-th user
    frame; the names are formatted once per chain."""
    where = call_site_memo_at(frame, short_path, depth)[1][1]
    return CallSite(where.site, list(where.stack), where.via)


def call_site_memo_at(
    frame: Any, short_path: Any = None, depth: int = 6
) -> tuple[tuple, tuple[tuple, CallSite]]:
    """`call_site_at`'s memo key for the stack outward from `frame` and its memo entry (the
    code objects that keep the key's ids theirs, the shared `CallSite`: not to be edited)."""
    _programs_checked()
    get = _ROLES.get
    key: list[Any] = [short_path, depth, 0, 0]
    codes: list[Any] = []
    users = 0
    f = frame
    while f is not None:
        code = f.f_code
        role = get(code.co_filename)
        if role == _OTHER:  # most frames: torch's, commlint's, the standard library's
            f = f.f_back
            continue
        if role is None:
            role = _role(code.co_filename)
        if role == _USER:
            key += (id(code), f.f_lineno)
            codes.append(code)
            users += 1
            if users >= depth:
                break
        elif role == _MAKER and not users and not key[2]:
            key[2], key[3] = id(code), f.f_lineno
            codes.append(code)
        f = f.f_back
    k = tuple(key)
    known = _SITES.get(k)
    if known is None:
        if len(_SITES) >= _SITES_MAX:
            _SITES.clear()
        known = _SITES[k] = (tuple(codes), user_call_site(_frames(frame), short_path, depth))
    return k, known


def site_still_known(key: tuple, known: tuple[tuple, CallSite]) -> bool:
    """`call_site_memo_at` would give `known` for `key` again (the memo was not dropped: the
    roles of files did not change). A caller that keeps `known` keeps its code objects, and
    with them the ids in `key`, theirs."""
    return _SITES.get(key) is known


def _frames(frame: Any) -> Iterable[Any]:
    while frame is not None:
        yield frame
        frame = frame.f_back
