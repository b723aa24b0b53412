"""Which of the user's own files a rank ran: the program and every module it imported from
outside installed packages, the standard library, torch and commlint.

The coverage report after the verdict (`commands/run_coverage.py`) checks these files
statically for communication the run never reached; files under `site-packages` are left
out even when `-m pkg.mod` makes the package the program (`callsites.is_user_file`): their
unreached paths are the framework's, not the user's, and linting them would cost minutes.
"""

from __future__ import annotations

import os
import sys

from commlint.callsites import PACKAGE_FOLDERS, is_user_file


def user_files(program: str) -> list[str]:
    """Absolute paths of the program and of the user's modules loaded in this process."""
    found = {os.path.abspath(program)} if program else set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not path.endswith(".py"):
            continue
        if any(folder in path for folder in PACKAGE_FOLDERS) or not is_user_file(path):
            continue
        found.add(os.path.abspath(path))
    return sorted(found)
