"""The one vocabulary every analysis emits: `Finding`, collected in a `Report`."""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field

Severity = Literal["error", "warning"]
M = TypeVar("M", bound=BaseModel)


class Location(BaseModel):
    """A place in a file, or in a trace (rank + action index), or both."""

    path: str | None = Field(default=None, description="File path as given on the command line.")
    line: int | None = Field(default=None, description="1-based line.")
    col: int | None = Field(default=None, description="1-based column.")
    end_line: int | None = Field(default=None, description="1-based last line, when known.")
    end_col: int | None = Field(default=None, description="1-based column after the end.")
    rank: int | None = Field(default=None, description="Global rank, for trace locations.")
    action: int | None = Field(default=None, description="Action index within the rank.")
    site: str | None = Field(default=None, description="The action's call site `file:line`.")
    message: str | None = Field(default=None, description="What this location is.")


class CycleEdge(BaseModel):
    """One edge of a wait-for cycle: `rank` is blocked in `op` waiting for `waits_for`."""

    rank: int = Field(description="The blocked rank.")
    action: int = Field(description="Index of its blocked action.")
    op: str = Field(description="Short form of the blocked action, e.g. `all_reduce(tp0)`.")
    group: str | None = Field(default=None, description="Process group of the blocked action.")
    site: str | None = Field(default=None, description="Call site of the blocked action.")
    waits_for: int = Field(description="The rank whose counterpart is missing.")


class Finding(BaseModel):
    """One problem, from any front end. The JSON form is shared by every subcommand."""

    code: str = Field(description="Rule code, e.g. `CL201`.")
    name: str = Field(default="", description="Rule name, e.g. `deadlock-cycle`.")
    severity: Severity = Field(description="`error`: hangs or fails in some run; `warning`: risk.")
    message: str = Field(description="What will happen, and where.")
    path: str | None = Field(default=None, description="File the finding is in.")
    line: int | None = Field(default=None, description="1-based line in `path`.")
    col: int | None = Field(default=None, description="1-based column in `path`.")
    end_line: int | None = Field(default=None, description="1-based end line.")
    end_col: int | None = Field(default=None, description="1-based end column.")
    ranks: list[int] = Field(default_factory=list, description="Ranks involved.")
    cycle: list[CycleEdge] | None = Field(
        default=None, description="For deadlocks: the wait-for cycle, edge by edge."
    )
    actions: list[Location] = Field(
        default_factory=list, description="The trace actions involved (rank, index, site)."
    )
    related: list[Location] = Field(
        default_factory=list,
        description="Secondary locations, e.g. the condition that makes a call rank-dependent.",
    )
    fix: str | None = Field(default=None, description="A concrete way to fix it.")
    models: list[str] | None = Field(
        default=None, description="Queue models under which a trace finding holds."
    )

    def where(self) -> str:
        """`path:line:col`, as much of it as is known; `<trace>` when there is no file."""
        text = self.path or "<trace>"
        if self.line is not None:
            text += f":{self.line}"
            if self.col is not None:
                text += f":{self.col}"
        return text

    def sort_key(self) -> tuple:
        return (self.path or "", self.line or 0, self.col or 0, self.code, self.ranks)


class InputError(BaseModel):
    """Input that could not be read or checked (exit code 2); the rest is still checked."""

    path: str | None = None
    line: int | None = None
    col: int | None = None
    message: str

    def one_line(self) -> str:
        where = self.path or "<input>"
        if self.line is not None:
            where += f":{self.line}"
            if self.col is not None:
                where += f":{self.col}"
        return f"{where}: {self.message}"


class Report(BaseModel):
    """Findings of one command run, plus the input errors met on the way."""

    findings: list[Finding] = Field(default_factory=list)
    errors: list[InputError] = Field(default_factory=list)
    checked: int = Field(default=0, description="Files/traces that were checked.")
    target: str | None = Field(
        default=None,
        description="A dry-run's target: the device it played for the program (`cuda`, `cpu`) "
        "and why; the verdict holds for that device. None for other commands.",
    )
    ranks: dict[str, int] | None = Field(
        default=None,
        description="A dry-run with rank classes: how many ranks were recorded (`recorded`) "
        "and how many derived from them (`derived`). None otherwise.",
    )

    def extend(self, other: Report) -> None:
        self.findings.extend(other.findings)
        self.errors.extend(other.errors)
        self.checked += other.checked

    def summary(self) -> dict[str, object]:
        by_code = Counter(f.code for f in self.findings)
        return {
            "findings": len(self.findings),
            "errors": sum(f.severity == "error" for f in self.findings),
            "warnings": sum(f.severity == "warning" for f in self.findings),
            "by_code": dict(sorted(by_code.items())),
            "checked": self.checked,
            "input_errors": len(self.errors),
            **({"target": self.target} if self.target else {}),
            **({"ranks": self.ranks} if self.ranks else {}),
        }

    def exit_code(self) -> int:
        if self.errors:
            return 2
        return 1 if self.findings else 0


class CommlintInputError(Exception):
    """Raised by readers for bad input; carries a one-line, located message."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        super().__init__(message)
        self.error = InputError(path=path, line=line, message=message)

    def __str__(self) -> str:
        return self.error.one_line()


@cache
def _defaults(model: type[BaseModel]) -> tuple[tuple[str, Any, Any], ...]:
    return tuple((n, f.default, f.default_factory) for n, f in model.model_fields.items())


def unvalidated(model: type[M], **values: Any) -> M:
    """`model(**values)` without validation, for values already of the right types (findings
    built by the analyses: validating 36,000 of them was a tenth of a 2 MB file's check). The
    fields not given get their defaults here: pydantic's own `model_construct` inspects each
    default factory's signature again on every call, slower than validating."""
    for name, default, factory in _defaults(model):
        if name not in values:
            values[name] = factory() if factory is not None else default
    return model.model_construct(**values)
