"""An exception that says the installed torch lacks an API the program uses.

A program written for a newer torch (torchtitan 0.3.0 asks for a nightly) fails on an older
one at the first name it reaches that the installed torch does not have: a function of a
torch module (`torch.distributed.set_timeout`), a name imported from one, a module, or a
keyword a torch function does not take. A real run fails there too, so this is the program's
own verdict, not a limit of fake tensors; what the user needs to know is which name, and
which line of the program (or of the framework it runs) uses it — the innermost frame outside
torch, not the program's call of `main()`. Only the builtin lookup's own errors count (an
`AttributeError` whose object is a torch module or class, an `ImportError` naming a torch
module): an attribute missing on an *instance* may be the program's own slip.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from collections.abc import Callable
from typing import Any

from commlint import callsites

_CANNOT_IMPORT = re.compile(r"cannot import name '([^']+)' from '([^']+)'")
_UNEXPECTED_KEYWORD = re.compile(r"^([\w.<>]+)\(\) got an unexpected keyword argument '(\w+)'")


def _is_torch(name: str) -> bool:
    return name == "torch" or name.startswith("torch.")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _torch_function(qualname: str) -> str | None:
    """`module.qualname` of a loaded torch function or method with that qualified name."""
    head, *rest = qualname.split(".")
    for name, module in list(sys.modules.items()):
        if not _is_torch(name) or module is None:
            continue
        obj = vars(module).get(head)
        for part in rest:
            obj = getattr(obj, part, None)
        if obj is not None and getattr(obj, "__qualname__", None) == qualname:
            owner = getattr(obj, "__module__", None) or name
            if _is_torch(owner):
                return f"{owner}.{qualname}"
    return None


def missing_name(exc: BaseException) -> str | None:
    """What the installed torch lacks, as the message names it, or None."""
    if isinstance(exc, AttributeError):
        obj, name = getattr(exc, "obj", None), getattr(exc, "name", None)
        if not name:
            return None
        if isinstance(obj, types.ModuleType) and _is_torch(obj.__name__):
            if _importable(f"{obj.__name__}.{name}"):
                return None  # a submodule the program did not import: its own slip
            return f"`{obj.__name__}.{name}`"
        if isinstance(obj, type) and _is_torch(obj.__module__):
            return f"`{obj.__module__}.{obj.__qualname__}.{name}`"
        return None
    if isinstance(exc, ImportError):
        found = _CANNOT_IMPORT.match(str(exc))
        if found and _is_torch(found.group(2)):
            return f"`{found.group(2)}.{found.group(1)}`"
        module = exc.name or ""
        if isinstance(exc, ModuleNotFoundError) and _is_torch(module) and module != "torch":
            return f"the module `{module}`"
        return None
    if isinstance(exc, TypeError):
        found = _UNEXPECTED_KEYWORD.match(str(exc))
        if found and not _raised_inside_torch(exc):
            function = _torch_function(found.group(1))
            if function:
                return f"the keyword `{found.group(2)}` of `{function}()`"
    return None


def _raised_inside_torch(exc: BaseException) -> bool:
    """The innermost frame is torch's: a keyword torch passed on, not one the caller gave."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and callsites.frame_kind(tb.tb_frame.f_code.co_filename) == "torch"


def _using_site(exc: BaseException, short_path: Callable[[str], str]) -> str | None:
    """The innermost frame outside torch, the standard library and commlint: the line that
    uses the name (the program's, or the framework's it runs)."""
    site = None
    tb: Any = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if callsites.frame_kind(filename) in ("user", "framework"):
            site = f"{short_path(filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


def explain(
    exc: BaseException, first_line: str, short_path: Callable[[str], str]
) -> tuple[str, str | None] | None:
    """(message, site) for an exception that says the installed torch lacks an API: the
    exception's own first line, then which name; None for any other exception."""
    name = missing_name(exc)
    if name is None:
        return None
    import torch

    message = (
        f"{first_line} — the installed torch {torch.__version__} has no {name}, which this line "
        "uses: the program is written for a torch that has it"
    )
    return message, _using_site(exc, short_path)
