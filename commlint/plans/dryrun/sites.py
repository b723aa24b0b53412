"""Where a recorded call comes from, inside one simulated rank: the user's own frames (the
program, not torch, a framework or commlint), the framework frame that issued a call for it,
the `torch.distributed` API a call went through, and which phase of DDP's C++ reducer made it.
Also what every part of the recording shares: the backend's name and `StopRank`."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from commlint import callsites
from commlint.trace import TORCH_ISSUED

BACKEND = "commlint"
_open, _stat = open, os.stat  # the real ones: a rank's `open` is wrapped (see files.FileView)
_TORCH_DIR = str(Path(torch.__file__).parent) + os.sep
_C10D_FILE = os.sep + os.path.join("distributed", "distributed_c10d.py")

_REDUCE_NAMES = {t: t.name.lower() for t in dist.ReduceOp.RedOpType.__members__.values()}
# Blocking Python APIs whose Work the API itself waits for: that wait is not an action.
_ASYNC_APIS = frozenset({"isend", "irecv", "batch_isend_irecv"})


class StopRank(BaseException):
    """Raised inside a rank to stop it: the time limit or the `--steps` limit was reached."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def is_user_file(filename: str) -> bool:
    """A frame of the user's program: not torch, commlint, the standard library or an
    installed package (`commlint.callsites`, shared with the guard)."""
    return callsites.is_user_file(filename)


def short_path(filename: str) -> str:
    return _short_path(filename, os.getcwd())


@functools.lru_cache(maxsize=4096)
def _short_path(filename: str, cwd: str) -> str:
    try:
        rel = os.path.relpath(filename, cwd)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def user_site(frames: list[Any]) -> tuple[str | None, list[str]]:
    """(site of the innermost user frame, stack: torch API frame first, then user frames)."""
    stack: list[str] = []
    site = None
    for i, f in enumerate(frames):
        name = f.f_code.co_filename
        if name.endswith(_RUNPY) or name == "<frozen runpy>":
            break  # the frames that ran the script: the dry-run's own, or its caller's
        if not is_user_file(name):
            continue
        if site is None:
            site = f"{short_path(name)}:{f.f_lineno}"
            api = _api_frame(frames[:i])
            if api is not None:
                torch_rel = api.f_code.co_filename[len(_TORCH_DIR) - len("torch/") :]
                stack.append(f"{torch_rel}:{api.f_lineno} in {api.f_code.co_name}")
        stack.append(f"{short_path(name)}:{f.f_lineno} in {f.f_code.co_name}")
        if len(stack) >= 8:
            break
    return site, stack


def framework_frame(frames: list[Any]) -> str | None:
    """The innermost installed-package frame (not torch) between the user's frame and
    torch's: the framework code that made the call for the user (Megatron's pipeline
    schedule, a trainer's all_gather), as `package/path.py:line in function`."""
    return callsites.framework_frame(frames)


_RUNPY = os.sep + "runpy.py"
_WRAPPER_FILES = ("c10d_logger.py", "functools.py", "contextlib.py", "_contextlib.py")


def _api_frame(inner: list[Any]) -> Any:
    """The torch function the user called: the frame next to the user's, minus decorators."""
    for f in reversed(inner):
        name = f.f_code.co_filename
        if name.startswith(_TORCH_DIR) and not name.endswith(_WRAPPER_FILES):
            return f
    return None


def _frames(skip: int = 2) -> list[Any]:
    f = sys._getframe(skip)
    out = []
    while f is not None:
        out.append(f)
        f = f.f_back
    return out


_API_WRAPPERS = (
    os.path.join("distributed", "c10d_logger.py"),
    os.path.join("torch", "_compile.py"),
    os.path.join("_dynamo", "eval_frame.py"),
    os.path.join("utils", "_contextlib.py"),
    os.path.join("typing_extensions.py"),
    os.path.join("dryrun", "tracked.py"),  # --rank-classes' windows around the API
)


def _c10d_api(frames: list[Any]) -> tuple[str | None, dict[str, Any], str | None]:
    """The outermost torch.distributed API function on the stack, its locals, and the
    function of torch's own code (not the program's) that called it, if torch's code did."""
    found, outside = _api_and_caller(frames)
    if found is None:
        return None, {}, None
    caller = None
    if outside is not None:
        name = outside.f_code.co_filename
        if name.startswith(_TORCH_DIR) and not is_user_file(name):
            caller = outside.f_code.co_name
    return found.f_code.co_name, found.f_locals, caller


def _api_and_caller(frames: list[Any]) -> tuple[Any, Any]:
    """(the outermost torch.distributed API frame on the stack, the frame that called it —
    past torch.distributed's own decorators, `_exception_logger`, ...), None when absent."""
    outer = None
    for i, f in enumerate(frames):
        if f.f_code.co_filename.endswith(_C10D_FILE):
            outer = i
    if outer is None:
        return None, None
    outside = (f for f in frames[outer + 1 :] if not f.f_code.co_filename.endswith(_API_WRAPPERS))
    return frames[outer], next(outside, None)


_DDP_PHASES = {
    "_pre_forward": "DDP bucket rebuild",
    "_sync_module_states": "DDP parameter broadcast",
    "_verify_param_shape_across_processes": "DDP model check",
}


def _cpp_origin(frames: list[Any]) -> str:
    names = [f.f_code.co_filename for f in frames]
    if any("_functional_collectives" in n for n in names):
        return "functional collective"
    for f in frames:
        if f.f_code.co_name in _DDP_PHASES and f.f_code.co_filename.startswith(_TORCH_DIR):
            return _DDP_PHASES[f.f_code.co_name]
    if any(os.sep + "autograd" + os.sep in n for n in names):
        return "DDP gradient bucket"
    return TORCH_ISSUED
