"""`[tool.commlint]` settings for `commlint check`, found by walking up from the paths."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from commlint.findings import CommlintInputError

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


@dataclass
class LintConfig:
    root: Path
    path: Path | None = None  # the pyproject.toml it came from
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    explicit_group_required: bool = False
    table_extra: dict[str, Any] = field(default_factory=dict)


def find_pyproject(paths: list[str]) -> Path | None:
    start = Path(paths[0]).resolve() if paths else Path.cwd()
    for folder in [start, *start.parents]:
        if folder.is_file():
            continue
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                continue
            if "commlint" in data.get("tool", {}):
                return candidate
    return None


def _strings(value: Any, key: str, path: Path) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise CommlintInputError(f"[tool.commlint] {key} must be a list of strings", str(path))


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
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CommlintInputError(f"invalid TOML: {exc}", str(pyproject)) from None
    section = data.get("tool", {}).get("commlint", {})
    cfg = LintConfig(root=pyproject.parent.resolve(), path=pyproject)
    lists = {k: _strings(section[k], k, pyproject) for k in LIST_KEYS if k in section}
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
    return cfg
