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
        name = f.f_code.co_filename
        kind = frame_kind(name)
        if kind == "user":
            return None
        if kind == "framework":
            if name.endswith(_DECORATOR_FILES) or os.sep + "wrapt" + os.sep in name:
                continue
            return f"{package_path(name)}:{f.f_lineno} in {f.f_code.co_name}"
    return None


class CallSite(NamedTuple):
    """Where a call was made, as both front ends record it."""

    site: str | None  # the user's innermost frame, `file:line`
    stack: list[str]  # the user's frames, innermost first, `file:line in function`
    via: str | None  # the framework frame that made the call, when one did


def user_call_site(frames: Iterable[Any], short_path: Any = None, depth: int = 6) -> CallSite:
    """The user's frames of a stack (`frames` innermost first, frame objects), at most
    `depth` of them, named by `short_path(filename)` (as given when None), and the framework
    frame that made the call. Frames of the standard library, torch and commlint are left out
    of the stack: they are the same for every call."""
    name_of = short_path or (lambda f: f)
    frames = list(frames)
    site = None
    stack: list[str] = []
    for f in frames:
        filename = f.f_code.co_filename
        if frame_kind(filename) != "user":
            continue
        entry = f"{name_of(filename)}:{f.f_lineno}"
        if site is None:
            site = entry
        stack.append(f"{entry} in {f.f_code.co_name}")
        if len(stack) >= depth:
            break
    return CallSite(site, stack, framework_frame(frames) if site is not None else None)
