"""The source edits of `commlint check`: `--add-noqa` writes a `# noqa` for every finding, and
`--fix` takes the codes that suppress nothing (CL113) out of `# noqa` comments. A file is
written back in its own encoding, BOM and line endings; files without edits are not touched."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from commlint.findings import Finding, InputError
from commlint.lint.noqa import add_noqa, remove_noqa_codes
from commlint.lint.source import Unreadable, decode_source
from commlint.lint.suppress import ENGINE_CODES, unused_noqa_codes

Edit = Callable[[str, Mapping[int, set[str]]], tuple[str, int]]


def _by_file(pairs: Iterable[tuple[str, int, str]]) -> dict[str, dict[int, set[str]]]:
    out: dict[str, dict[int, set[str]]] = {}
    for path, line, code in pairs:
        out.setdefault(path, {}).setdefault(line, set()).add(code)
    return out


def edit_text(data: bytes, edit: Edit, wanted: Mapping[int, set[str]]) -> tuple[bytes, int]:
    """`data` after `edit`, encoded as it was read; raises `Unreadable`."""
    decoded = decode_source(data)
    text, count = edit(decoded.text, wanted)
    return (decoded.encode(text) if count else data), count


def _edit_files(
    per_file: dict[str, dict[int, set[str]]], edit: Edit
) -> tuple[int, list[InputError]]:
    total = 0
    errors: list[InputError] = []
    for path, wanted in sorted(per_file.items()):
        try:
            data = Path(path).read_bytes()
            new, count = edit_text(data, edit, wanted)
            if count:
                Path(path).write_bytes(new)
        except OSError as exc:
            errors.append(InputError(path=path, message=f"cannot edit: {exc.strerror}"))
            continue
        except Unreadable as exc:
            errors.append(InputError(path=path, line=exc.line, message=exc.message))
            continue
        total += count
    return total, errors


def noqa_wanted(findings: Iterable[Finding]) -> dict[str, dict[int, set[str]]]:
    """Per file, per line, the codes a `# noqa` would suppress (CL100/CL113/CL114 cannot be)."""
    return _by_file(
        (f.path, f.line, f.code)
        for f in findings
        if f.path and f.line and f.code not in ENGINE_CODES
    )


def add_noqa_files(findings: Iterable[Finding]) -> tuple[int, list[InputError]]:
    """Write `# noqa` for `findings` into their files: the directives added, and the files
    that could not be edited."""
    return _edit_files(noqa_wanted(findings), add_noqa)


def remove_unused(
    text: str, wanted: Mapping[int, set[str]], into: set[tuple[str, int, str]], path: str
) -> tuple[str, int]:
    """`text` without the unused codes of `wanted`; what was taken out goes into `into`."""
    new, removed = remove_noqa_codes(text, wanted)
    into.update((path, line, code) for line, code in removed)
    return new, len(removed)


def unused_noqa(findings: Iterable[Finding]) -> dict[str, dict[int, set[str]]]:
    """Per file, per line, the codes CL113 found unused."""
    return _by_file(
        (f.path, f.line, code)
        for f in findings
        if f.path and f.line
        for code in unused_noqa_codes(f)
    )


def fix_files(
    findings: list[Finding], skip: str | None = None
) -> tuple[set[tuple[str, int, str]], list[InputError]]:
    """Take the unused codes of `findings` (CL113) out of their files' `# noqa` comments
    (not from `skip`, standard input's name): the (path, line, code) taken out, and the files
    that could not be edited."""
    fixed: set[tuple[str, int, str]] = set()
    errors: list[InputError] = []
    for path, wanted in sorted(unused_noqa(findings).items()):
        if path == skip:
            continue
        before = set(fixed)
        _count, errs = _edit_files(
            {path: wanted}, lambda text, w, p=path: remove_unused(text, w, fixed, p)
        )
        if errs:  # not written: nothing was fixed there
            fixed.intersection_update(before)
            errors.extend(errs)
    return fixed, errors


def is_fixed(finding: Finding, fixed: set[tuple[str, int, str]]) -> bool:
    """A CL113 finding whose codes were all taken out."""
    codes = unused_noqa_codes(finding)
    return bool(codes) and all((finding.path, finding.line, c) in fixed for c in codes)
