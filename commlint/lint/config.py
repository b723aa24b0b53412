"""`[tool.commlint]` settings for `commlint check`, found by walking up from the paths."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from commlint.findings import CommlintInputError
from commlint.lint.per_file import PerFileIgnore, PerFileIgnores

LIST_KEYS = (
    "select",
    "ignore",
    "extend-select",
    "exclude",
    "extend-exclude",
    "rank-helpers",
    "rank-attributes",
    "rank-env",
    "rank-zero-decorators",
)
TABLE_KEYS = ("calls", "group-getters", "rank-sources")
PER_FILE_KEYS = ("per-file-ignores", "extend-per-file-ignores")
OTHER_KEYS = ("explicit-group-required", "world-sizes")
KNOWN_KEYS = (*LIST_KEYS, *TABLE_KEYS, *PER_FILE_KEYS, *OTHER_KEYS)
SELECTOR_KEYS = ("select", "ignore", "extend-select")


@dataclass
class LintConfig:
    root: Path
    path: Path | None = None  # the pyproject.toml it came from
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    explicit_group_required: bool = False
    world_sizes: list[int] | None = None  # per-rank evaluation (CL115-CL118); None: default
    table_extra: dict[str, Any] = field(default_factory=dict)
    per_file_ignores: PerFileIgnores = field(default_factory=PerFileIgnores)
    warnings: list[str] = field(default_factory=list)  # one located line each (unknown keys)


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed file, or a one-line error naming the file and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommlintInputError(f"cannot read: {exc.strerror}", str(path)) from None
    except UnicodeDecodeError as exc:
        raise CommlintInputError(f"not valid UTF-8 ({exc.reason})", str(path)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        if at:
            msg += f" (column {at[2]})"
        raise CommlintInputError(
            f"invalid TOML: {msg}", str(path), int(at[1]) if at else None
        ) from None


def find_pyproject(paths: list[str]) -> Path | None:
    """The nearest pyproject.toml with a [tool.commlint] table, walking up from the first path.
    A pyproject.toml met on the way that is not valid TOML is an error (it might hold the
    settings), as in ruff."""
    try:
        start = Path(paths[0]).resolve() if paths else Path.cwd()
    except (OSError, RuntimeError):  # a symlink loop: reported by discovery
        start = Path.cwd()
    for folder in [start, *start.parents]:
        if folder.is_file():
            continue
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            data = _read_toml(candidate)
            if "commlint" in data.get("tool", {}):
                return candidate
    return None


def key_line(text: str, key: str) -> int | None:
    """The line of `key = ...` in the [tool.commlint] table (for located messages)."""
    table = ""
    pattern = re.compile(rf"""^\s*["']?{re.escape(key)}["']?\s*=""")
    for n, line in enumerate(text.splitlines(), 1):
        head = re.match(r"^\s*\[\s*([^\]]+?)\s*\]", line)
        if head:
            table = head[1].replace('"', "").replace(" ", "")
        elif table == "tool.commlint" and pattern.match(line):
            return n
    return None


def check_selectors(
    codes: list[str], what: str, path: str | None = None, line: int | None = None
) -> None:
    """Every selector must be ALL or a prefix of a known rule code (as ruff)."""
    from commlint.rules import all_rules

    known = list(all_rules())
    for code in codes:
        c = code.strip().upper()
        if c != "ALL" and not any(k.startswith(c) for k in known):
            digits = c[:2] + c[2:].translate(str.maketrans("OIL", "011"))  # O for 0, l for 1
            valid = digits != c and any(k.startswith(digits) for k in known)
            hint = [digits] if valid else difflib.get_close_matches(c, known, n=1)
            extra = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise CommlintInputError(f"unknown rule selector '{code}' in {what}{extra}", path, line)


def _strings(value: Any, key: str, path: Path, line: int | None = None) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise CommlintInputError(f"[tool.commlint] {key} must be a list of strings", str(path), line)


def load_config(paths: list[str], explicit: str | None = None) -> LintConfig:
    """Settings from `explicit` (a pyproject.toml) or the nearest one with [tool.commlint]."""
    if explicit:
        pyproject = Path(explicit)
        if not pyproject.is_file():
            raise CommlintInputError("configuration file not found", explicit)
    else:
        pyproject = find_pyproject(paths)
    if pyproject is None:
        return LintConfig(root=Path.cwd())
    data = _read_toml(pyproject)
    text = pyproject.read_text(encoding="utf-8")
    section = data.get("tool", {}).get("commlint", {})
    if not isinstance(section, dict):
        raise CommlintInputError("[tool.commlint] must be a table", str(pyproject))
    cfg = LintConfig(root=pyproject.parent.resolve(), path=pyproject)
    for key in section:
        if key not in KNOWN_KEYS:
            hint = difflib.get_close_matches(key, KNOWN_KEYS, n=1)
            where = f"{pyproject}:{key_line(text, key) or 1}"
            cfg.warnings.append(
                f"{where}: unknown key '{key}' in [tool.commlint], ignored"
                + (f" (did you mean '{hint[0]}'?)" if hint else "")
            )
    lists = {
        k: _strings(section[k], k, pyproject, key_line(text, k)) for k in LIST_KEYS if k in section
    }
    for k in SELECTOR_KEYS:
        if k in lists:
            check_selectors(lists[k], f"[tool.commlint] {k}", str(pyproject), key_line(text, k))
    cfg.select = lists.get("select")
    cfg.ignore = lists.get("ignore", [])
    cfg.extend_select = lists.get("extend-select", [])
    cfg.exclude = lists.get("exclude", []) + lists.get("extend-exclude", [])
    egr = section.get("explicit-group-required", False)
    if not isinstance(egr, bool):
        raise CommlintInputError(
            "[tool.commlint] explicit-group-required must be true or false", str(pyproject)
        )
    cfg.explicit_group_required = egr
    sizes = section.get("world-sizes")
    if sizes is not None:
        if not (
            isinstance(sizes, list)
            and sizes
            and all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 64 for n in sizes)
        ):
            raise CommlintInputError(
                "[tool.commlint] world-sizes must be a list of integers from 1 to 64",
                str(pyproject),
            )
        cfg.world_sizes = sorted(set(sizes))
    extra: dict[str, Any] = {}
    for k in ("rank-helpers", "rank-attributes", "rank-env", "rank-zero-decorators"):
        if k in lists:
            extra[k.replace("-", "_")] = lists[k]
    for k in TABLE_KEYS:
        if k in section:
            if not isinstance(section[k], dict):
                raise CommlintInputError(f"[tool.commlint] {k} must be a table", str(pyproject))
            extra[k.replace("-", "_")] = section[k]
    try:
        from commlint.lint.table import build_table

        build_table(extra)
    except (ValueError, TypeError, KeyError) as exc:
        raise CommlintInputError(f"[tool.commlint]: {exc}", str(pyproject)) from None
    cfg.table_extra = extra
    cfg.per_file_ignores = _per_file_ignores(section, cfg.root, pyproject, text)
    return cfg


def _per_file_ignores(
    section: dict[str, Any], root: Path, pyproject: Path, text: str
) -> PerFileIgnores:
    """`per-file-ignores` then `extend-per-file-ignores`: pattern -> selectors, patterns
    relative to the folder of `pyproject` (as ruff)."""
    rules: list[PerFileIgnore] = []
    for key in PER_FILE_KEYS:
        table = section.get(key)
        if table is None:
            continue
        line = key_line(text, key)
        if not isinstance(table, dict):
            raise CommlintInputError(
                f"[tool.commlint] {key} must be a table of pattern = [codes]", str(pyproject), line
            )
        for pattern, codes in table.items():
            what = f"[tool.commlint] {key} '{pattern}'"
            if isinstance(codes, str) or not (
                isinstance(codes, list) and all(isinstance(c, str) for c in codes)
            ):
                raise CommlintInputError(f"{what} must be a list of codes", str(pyproject), line)
            check_selectors(codes, what, str(pyproject), line)
            try:
                rules.append(PerFileIgnore.build(pattern, codes, root))
            except re.error as exc:
                raise CommlintInputError(
                    f"{what}: invalid pattern ({exc})", str(pyproject), line
                ) from None
    return PerFileIgnores(tuple(rules))
