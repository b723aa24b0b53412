"""What a dry-run did not see: communication in the user's files that no rank reached.

A dry-run's verdict covers the paths the ranks took — five steps of a loop whose evaluation
all-reduces every tenth step never meet that all-reduce. After the verdict, the static engine
(`commlint.lint`) reads the user's files the ranks ran (`plans/dryrun/executed.py`: the
program and the modules it imported from outside installed packages) and lists each call of
torch.distributed — a collective, a send or receive — whose line no recorded stack passed
through, with the branch it sits under (or, at a function's top, where that function is
called); the static findings on those lines follow. The files are extracted once each, in this
process, with no cache written into the user's tree; installed packages are never read.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from commlint.findings import Finding
from commlint.lint.ir import Branch, CallSite, Comm, FileFacts, Loop, Node, Spawn, Try

# what the dry-run records as an action (a group's creation and teardown are not calls that
# can be left unmatched in a step)
_RECORDED_KINDS = ("collective", "send", "recv", "batch")
SHOWN = 10  # unreached calls listed one by one; the rest are counted


@dataclass(frozen=True)
class Unreached:
    """A torch collective, send or receive on a line no rank's recorded stack passed
    through."""

    path: str  # absolute
    line: int
    end_line: int
    op: str
    function: str  # the function it is in (`<module>` at top level)
    under: str | None  # the innermost branch it sits under, as the source says it
    under_line: int | None
    # when it sits under no branch of its function: where that function is called (path,
    # line, the branch that call sits under), the first call in the files checked
    called_at: tuple[str, int, str | None] | None = None

    def describe(self, shown: Callable[[str], str]) -> str:
        if self.under:
            context = f"under {self.under} at line {self.under_line}"
        elif self.function == "<module>":
            context = "at the top level"
        else:
            context = f"in `{self.function}`"
            if self.called_at:
                path, line, under = self.called_at
                context += f", called at {shown(path)}:{line}" + (
                    f" under {under}" if under else ""
                )
        return f"{shown(self.path)}:{self.line} {self.op} ({context})"


def reached_lines(runs: Mapping[int, Any]) -> dict[str, set[int]]:
    """Every user frame (`file:line`) of every recorded action and group creation, by
    absolute file."""
    seen: dict[str, set[int]] = {}

    def add(entry: str | None) -> None:
        if not entry:
            return
        where = entry.split(" in ", 1)[0]
        path, _, line = where.rpartition(":")
        if path and line.isdigit():
            seen.setdefault(os.path.abspath(path), set()).add(int(line))

    for run in runs.values():
        for action in run.actions:
            add(action.get("site"))
            for entry in action.get("stack") or ():
                add(entry)
        for created in run.creations:
            add(created.get("site"))
    return seen


def _label(branch: Branch, arm: int) -> str:
    text = branch.cond.text.strip()
    if branch.kind == "if":
        return f"`if {text}:`" if arm == 0 else f"the `else` of `if {text}:`"
    if branch.kind == "ternary":
        return f"`... if {text} else ...`"
    return f"`{text}`"


def _walk(nodes: Iterable[Node], under: tuple[str, int] | None):
    """(node, innermost branch it sits under) for every node, depth first."""
    for n in nodes:
        yield n, under
        if isinstance(n, Branch):
            for i, arm in enumerate(n.arms):
                yield from _walk(arm, (_label(n, i), n.pos.line))
        elif isinstance(n, Loop):
            yield from _walk(n.body, under)
        elif isinstance(n, Try):
            yield from _walk(n.body, under)
            for handler in n.handlers:
                yield from _walk(handler, ("an `except` handler", n.pos.line))
            yield from _walk(n.orelse, under)
            yield from _walk(n.final, under)
        elif isinstance(n, Spawn):
            yield n.target, under


def _call_sites(facts: list[FileFacts]) -> dict[str, tuple[str, int, str | None]]:
    """The first call of each of the program's functions in the files checked: function key
    → (path, line, the branch the call sits under)."""
    keys = {key for ff in facts for key in ff.functions}
    found: dict[str, tuple[str, int, str | None]] = {}
    for ff in facts:
        for fn in ff.functions.values():
            for n, under in _walk(fn.body, None):
                if isinstance(n, CallSite):
                    key = next((name for name in n.names if name in keys), None)
                    if key is not None and key not in found:
                        found[key] = (ff.path, n.pos.line, under[0] if under else None)
    return found


def unreached_calls(facts: list[FileFacts], reached: Mapping[str, set[int]]) -> list[Unreached]:
    """The torch collectives, sends and receives in `facts` on lines no recorded stack
    passed through. Only those: a call of torch.distributed that runs is always recorded, so
    an unrecorded one did not run; a framework's wrapper (`accelerator.prepare`) or one of
    the program's own functions may run and communicate nothing, which says nothing about
    whether it was reached."""
    calls = _call_sites(facts)
    out: list[Unreached] = []
    for ff in facts:
        lines = reached.get(os.path.abspath(ff.path), set())
        for key, fn in ff.functions.items():
            for n, under in _walk(fn.body, None):
                if not (isinstance(n, Comm) and n.torch_api and n.kind in _RECORDED_KINDS):
                    continue
                end = n.pos.end_line or n.pos.line
                if any(line in lines for line in range(n.pos.line, end + 1)):
                    continue
                name = fn.name or "<module>"
                out.append(
                    Unreached(
                        ff.path,
                        n.pos.line,
                        end,
                        n.op,
                        name,
                        under[0] if under else None,
                        under[1] if under else None,
                        None if under or name == "<module>" else calls.get(key),
                    )
                )
    return sorted(set(out), key=lambda u: (u.path, u.line, u.op))


def _module(path: str, root: str) -> str:
    from commlint.lint.analyze import module_name

    rel = os.path.relpath(path, root)
    return module_name(rel if not rel.startswith("..") else os.path.basename(path))


def extract_files(paths: list[str], root: str) -> list[FileFacts]:
    """The static engine's facts of each file (a file it cannot read is left out)."""
    from commlint.lint.engine import extract

    extra_key = json.dumps({}, sort_keys=True)
    facts = []
    for path in paths:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        ff = extract(path, _module(path, root), data, extra_key)
        if ff.syntax_error is None and ff.internal_error is None:
            facts.append(ff)
    return facts


def static_findings(paths: list[str], sites: list[Unreached]) -> list[Finding]:
    """The static engine's findings on the unreached calls' lines (and their branches')."""
    from commlint.lint.config import load_config
    from commlint.lint.engine import LintOptions, lint_paths

    wanted: dict[str, set[int]] = {}
    for u in sites:
        lines = wanted.setdefault(os.path.abspath(u.path), set())
        lines.update(range(u.line, u.end_line + 1))
        if u.under_line:
            lines.add(u.under_line)
    try:
        config = load_config(paths)
    except Exception:  # a broken configuration is `commlint check`'s to report
        return []
    opts = LintOptions(cache=False, jobs=1, context=False, progress_after=float("inf"))
    report = lint_paths(paths, config, opts)
    return [
        f
        for f in report.findings
        if f.path and f.line and f.line in wanted.get(os.path.abspath(f.path), ())
    ]


def coverage(runs: Mapping[int, Any], program: str) -> tuple[list[Unreached], list[Finding]]:
    """The unreached calls of the user's files the ranks ran, and the static findings on
    them."""
    files = sorted({f for run in runs.values() for f in run.files})
    if not files:
        return [], []
    root = os.path.dirname(os.path.abspath(program))
    sites = unreached_calls(extract_files(files, root), reached_lines(runs))
    if not sites:
        return [], []
    return sites, static_findings(sorted({u.path for u in sites}), sites)


def print_coverage(runs: Mapping[int, Any], program: str, shown: Any) -> None:
    """After the verdict, on stderr: the calls no rank reached, then the static findings on
    their lines (`shown(path)`: a path as the report gives it)."""
    from commlint.report.text import block

    sites, findings = coverage(runs, program)
    if not sites:
        return
    sys.stdout.flush()  # the verdict first
    for u in sites[:SHOWN]:
        print(f"commlint: note: not reached by this run: {u.describe(shown)}", file=sys.stderr)
    if len(sites) > SHOWN:
        print(
            f"commlint: note: ... and {len(sites) - SHOWN} more calls that communicate, not "
            "reached",
            file=sys.stderr,
        )
    verdict = "the verdict above does not cover them"
    if findings:
        print(f"commlint: note: {verdict}; the static check finds on those lines:", file=sys.stderr)
        for f in findings:
            f.path = shown(f.path)
            for rel in f.related:
                rel.path = shown(rel.path) if rel.path else rel.path
            for line in block(f):
                print(f"  {line}", file=sys.stderr)
    else:
        print(
            f"commlint: note: {verdict}; the static check finds nothing wrong on those lines",
            file=sys.stderr,
        )
