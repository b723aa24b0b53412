"""`commlint check`: files -> facts (cached, in parallel) -> program analysis -> findings."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import subprocess
import tokenize
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from io import BytesIO
from pathlib import Path

import libcst as cst

from commlint._version import __version__
from commlint.findings import Finding, InputError, Location, Report
from commlint.lint.analyze import Program, RawFinding, module_name
from commlint.lint.config import LintConfig
from commlint.lint.extract import Extractor
from commlint.lint.ir import FileFacts, Pos
from commlint.lint.table import ApiTable, build_table, table_fingerprint

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "node_modules",
        "build",
        "dist",
        ".commlint_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        "site-packages",
        ".eggs",
    }
)
ENGINE_CODES = ("CL100", "CL113")


@dataclass
class LintOptions:
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    jobs: int = 0  # 0: automatic
    cache: bool = True
    cache_dir: Path | None = None
    diff_ref: str | None = None


# ------------------------------------------------------------------ selection
def _matches(code: str, specs: Iterable[str]) -> bool:
    return any(s == "ALL" or code.startswith(s) for s in specs)


def enabled_codes(config: LintConfig, opts: LintOptions) -> set[str]:
    """ruff semantics, layer by layer (config, then flags): a layer's `select` resets the
    selection, its `extend-select` adds to it, its `ignore` removes from it."""
    from commlint.rules import all_rules

    codes = [r.code for r in all_rules().values() if r.kind == "source"]
    chosen = {c for c in codes if _matches(c, ["CL1"])}
    layers = (
        (config.select, config.extend_select, config.ignore),
        (opts.select, opts.extend_select, opts.ignore),
    )
    for select, extend, ignore in layers:
        if select is not None:
            chosen = {c for c in codes if _matches(c, [s.upper() for s in select])}
        chosen |= {c for c in codes if _matches(c, [s.upper() for s in extend])}
        chosen -= {c for c in codes if _matches(c, [s.upper() for s in ignore])}
    return chosen


# ------------------------------------------------------------------ discovery
def discover(paths: list[str], config: LintConfig) -> tuple[list[Path], list[InputError]]:
    files: list[Path] = []
    errors: list[InputError] = []
    excludes = config.exclude
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            errors.append(InputError(path=raw, message="No such file or directory"))
            continue
        if p.is_file():
            files.append(p)
            continue
        for dirpath, dirnames, filenames in os.walk(p):
            dirnames[:] = sorted(
                d
                for d in dirnames
                if d not in SKIP_DIRS
                and not d.endswith(".egg-info")
                and not _excluded(Path(dirpath, d), excludes, config.root)
            )
            for name in sorted(filenames):
                if name.endswith(".py"):
                    fp = Path(dirpath, name)
                    if not _excluded(fp, excludes, config.root):
                        files.append(fp)
    seen: dict[str, Path] = {}
    for f in files:
        seen.setdefault(str(f), f)
    return list(seen.values()), errors


def _excluded(path: Path, patterns: list[str], root: Path) -> bool:
    if not patterns:
        return False
    try:
        rel = path.resolve().relative_to(root)
    except ValueError:
        rel = path
    text = rel.as_posix()
    return any(
        rel.match(p)
        or path.name == p
        or text == p.rstrip("/")
        or text.startswith(p.rstrip("/") + "/")
        for p in patterns
    )


# ------------------------------------------------------------------ extraction
@cache
def _table(extra_key: str) -> ApiTable:
    import json

    return build_table(json.loads(extra_key))


def decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        try:
            encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
            if encoding.lower().replace("_", "-") not in ("utf-8", "utf-8-sig"):
                return data.decode(encoding)
        except (SyntaxError, LookupError, UnicodeDecodeError):
            pass
        line = data[: exc.start].count(b"\n") + 1
        raise _Unreadable(line, f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


class _Unreadable(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def extract(path: str, module: str, data: bytes, extra_key: str) -> FileFacts:
    """One file's facts. Never raises for bad input: a syntax error is part of the facts."""
    table = _table(extra_key)
    try:
        source = decode(data)
    except _Unreadable as exc:
        return FileFacts(
            path=path, module=module, functions={}, syntax_error=(exc.line, 1, exc.message)
        )
    if not table.prefilter.search(source):
        return FileFacts(path=path, module=module, functions={}, skipped=True)
    try:
        return Extractor(path, module, source, table).run()
    except cst.ParserSyntaxError as exc:
        msg = str(exc.message if hasattr(exc, "message") else exc).splitlines()[0]
        return FileFacts(
            path=path,
            module=module,
            functions={},
            syntax_error=(exc.raw_line, exc.raw_column + 1, f"syntax error: {msg}"),
        )
    except RecursionError:
        return FileFacts(
            path=path,
            module=module,
            functions={},
            syntax_error=(1, 1, "too deeply nested to analyse"),
        )
    except Exception as exc:  # a bug of ours must not stop the other files from being checked
        return FileFacts(
            path=path, module=module, functions={}, internal_error=f"{type(exc).__name__}: {exc}"
        )


def _extract_job(args: tuple[str, str, bytes, str]) -> FileFacts:
    return extract(*args)


@cache
def _extractor_fingerprint() -> str:
    """The extraction code itself is part of the cache key (facts change when it does)."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in ("extract.py", "ir.py", "table.py", "api_table.yaml"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


class Cache:
    """Extracted facts per file, keyed by content hash + table/config + commlint version."""

    def __init__(self, folder: Path, fingerprint: str) -> None:
        self.folder = folder / __version__
        self.fingerprint = fingerprint

    def key(self, path: str, module: str, data: bytes) -> str:
        h = hashlib.sha256(data)
        h.update(f"\0{path}\0{module}\0{self.fingerprint}\0{__version__}".encode())
        h.update(_extractor_fingerprint().encode())
        return h.hexdigest()

    def get(self, key: str) -> FileFacts | None:
        f = self.folder / key[:2] / f"{key}.pkl"
        try:
            with open(f, "rb") as fh:
                return pickle.load(fh)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError):
            return None

    def put(self, key: str, facts: FileFacts) -> None:
        d = self.folder / key[:2]
        try:
            d.mkdir(parents=True, exist_ok=True)
            (self.folder.parent / ".gitignore").write_text("*\n")
            tmp = d / f".{key}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                pickle.dump(facts, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, d / f"{key}.pkl")
        except OSError:
            pass


# ------------------------------------------------------------------ main entry
def lint_paths(paths: list[str], config: LintConfig, opts: LintOptions) -> Report:
    import json

    from commlint.rules import all_rules

    report = Report()
    files, errors = discover(paths, config)
    report.errors.extend(errors)
    extra_key = json.dumps(config.table_extra, sort_keys=True, default=str)
    table = _table(extra_key)
    cache_obj = (
        Cache(
            opts.cache_dir or config.root / ".commlint_cache", table_fingerprint(config.table_extra)
        )
        if opts.cache
        else None
    )
    facts: list[FileFacts] = []
    todo: list[tuple[str, str, bytes, str]] = []
    keys: dict[str, str] = {}
    for f in files:
        path = str(f)
        try:
            data = f.read_bytes()
        except OSError as exc:
            report.errors.append(InputError(path=path, message=f"cannot read: {exc.strerror}"))
            continue
        module = module_name(_relative(f, config.root))
        if cache_obj is not None:
            key = cache_obj.key(path, module, data)
            hit = cache_obj.get(key)
            if hit is not None:
                facts.append(hit)
                continue
            keys[path] = key
        todo.append((path, module, data, extra_key))
    jobs = opts.jobs if opts.jobs > 0 else (os.cpu_count() or 1)
    fresh: list[FileFacts] = []

    def keep(ff: FileFacts) -> None:
        fresh.append(ff)
        if cache_obj is not None and ff.path in keys:
            cache_obj.put(keys[ff.path], ff)

    if jobs > 1 and len(todo) >= 16:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            chunk = max(1, min(8, len(todo) // (jobs * 4)))
            for ff in pool.map(_extract_job, todo, chunksize=chunk):
                keep(ff)
    else:
        for t in todo:
            keep(_extract_job(t))
    facts.extend(fresh)
    facts.sort(key=lambda x: x.path)
    report.checked = len(facts)

    enabled = enabled_codes(config, opts)
    program = Program(facts, table, {"explicit_group_required": config.explicit_group_required})
    raw: list[RawFinding] = []
    for ff in facts:
        if ff.syntax_error is not None and "CL100" in enabled:
            line, col, msg = ff.syntax_error
            raw.append(
                RawFinding(
                    "CL100",
                    f"{msg}; the file was not checked",
                    ff.path,
                    Pos(line, col, line, col + 1, line),
                    "Fix the file so that it parses (`python -m py_compile`).",
                )
            )
    for ff in facts:
        if ff.internal_error is not None:
            report.errors.append(
                InputError(
                    path=ff.path,
                    message=f"internal error while analysing: {ff.internal_error} "
                    "(please report it)",
                )
            )
    rules = all_rules()
    for code in sorted(enabled):
        rule = rules[code]
        if rule.check is None:
            continue
        try:
            raw.extend(rule.check(program))
        except Exception as exc:
            if os.environ.get("COMMLINT_DEBUG"):
                raise
            report.errors.append(
                InputError(message=f"internal error in rule {code}: {type(exc).__name__}: {exc}")
            )
    findings = _apply_noqa(raw, facts, enabled)
    if opts.diff_ref:
        changed, err = changed_lines(opts.diff_ref, [str(f) for f in files])
        if err:
            report.errors.append(InputError(message=err))
        else:
            findings = [
                f
                for f in findings
                if f.path and f.line and f.line in changed.get(str(Path(f.path).resolve()), ())
            ]
    report.findings.extend(findings)
    return report


def _relative(f: Path, root: Path) -> str:
    try:
        return str(f.resolve().relative_to(root))
    except ValueError:
        return str(f)


def to_finding(r: RawFinding) -> Finding:
    from commlint.rules import all_rules

    rule = all_rules()[r.code]
    return Finding(
        code=r.code,
        name=rule.name,
        severity=rule.severity,
        message=r.message,
        path=r.path,
        line=r.pos.line,
        col=r.pos.col,
        end_line=r.pos.end_line,
        end_col=r.pos.end_col,
        related=[
            Location(
                path=p,
                line=pos.line,
                col=pos.col,
                end_line=pos.end_line,
                end_col=pos.end_col,
                message=m,
            )
            for p, pos, m in r.related
        ],
        fix=r.fix,
    )


def _apply_noqa(raw: list[RawFinding], facts: list[FileFacts], enabled: set[str]) -> list[Finding]:
    by_path = {f.path: f for f in facts}
    used: set[tuple[str, int, str]] = set()
    out: list[Finding] = []
    seen: set[tuple] = set()
    for r in raw:
        ident = (r.code, r.path, r.pos.line, r.pos.col, r.message)
        if ident in seen:
            continue
        seen.add(ident)
        ff = by_path.get(r.path)
        suppressed = False
        if ff is not None and r.code != "CL100":
            for line in dict.fromkeys((r.pos.line, r.pos.stmt_line)):
                codes = ff.noqa.get(line, frozenset())
                if codes is None:
                    suppressed = True
                    break
                hit = next((c for c in codes if r.code.startswith(c)), None)
                if hit:
                    used.add((r.path, line, hit))
                    suppressed = True
                    break
        if not suppressed:
            out.append(to_finding(r))
    if "CL113" in enabled:
        from commlint.rules import all_rules

        known = set(all_rules())
        for ff in facts:
            for line, codes in sorted(ff.noqa.items()):
                if not codes:
                    continue
                for code in sorted(codes):
                    if not code.startswith("CL") or (ff.path, line, code) in used:
                        continue
                    if code in known and code not in enabled:
                        continue
                    why = "unknown code" if code not in known else "nothing to suppress"
                    text = _line_text(ff.path, line)
                    col = text.find("#") + 1 if "#" in text else 1
                    r = RawFinding(
                        "CL113",
                        f"`# noqa: {code}` on line {line} suppresses nothing ({why})",
                        ff.path,
                        Pos(line, col, line, len(text) + 1, line),
                        f"Remove `{code}` from the `# noqa` comment.",
                    )
                    out.append(to_finding(r))
    return out


def _line_text(path: str, line: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for k, text in enumerate(fh, 1):
                if k == line:
                    return text.rstrip("\n")
    except OSError:
        pass
    return ""


HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def changed_lines(ref: str, paths: list[str]) -> tuple[dict[str, set[int]], str | None]:
    """Lines added or changed since `ref` (`git diff -U0 REF`), per absolute path."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        proc = subprocess.run(
            ["git", "diff", "-U0", "--no-color", "--no-ext-diff", ref, "--", *paths],
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        return {}, f"--diff needs a git work tree: {exc}"
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or ["git diff failed"])[0]
        return {}, f"--diff {ref}: {msg}"
    out: dict[str, set[int]] = {}
    current: set[int] | None = None
    for line in proc.stdout.splitlines():
        if line.startswith("+++ "):
            name = line[4:]
            if name == "/dev/null":
                current = None
                continue
            name = name[2:] if name.startswith("b/") else name
            current = out.setdefault(str((Path(top) / name).resolve()), set())
        elif line.startswith("@@") and current is not None:
            m = HUNK.match(line)
            if m:
                start, count = int(m.group(1)), int(m.group(2) or 1)
                current.update(range(start, start + count))
    # untracked files are new: every line counts
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "--full-name", "--", *paths],
        capture_output=True,
        text=True,
    )
    for name in untracked.stdout.splitlines():
        p = str((Path(top) / name).resolve())
        try:
            with open(p, encoding="utf-8", errors="replace") as fh:
                n = sum(1 for _ in fh)
        except OSError:
            continue
        out[p] = set(range(1, n + 1))
    return out, None
