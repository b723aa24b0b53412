"""`commlint check`: files -> facts (cached, in parallel) -> program analysis -> findings."""

from __future__ import annotations

import ast
import ctypes
import hashlib
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from commlint._version import __version__
from commlint.findings import InputError, Report
from commlint.gc_pause import collector_off_for_the_rest
from commlint.lint.analyze import Program, RawFinding, module_name
from commlint.lint.config import LintConfig
from commlint.lint.discovery import changed_lines, discover, project_context
from commlint.lint.gc_pause import Survivors, paused_gc, survivors_kept_apart
from commlint.lint.ir import FileFacts, Pos, communicates
from commlint.lint.names import Names
from commlint.lint.parsed_trees import kept_trees, open_store
from commlint.lint.source import Unreadable, decode_source
from commlint.lint.suppress import Sources, apply_suppressions
from commlint.lint.table import ApiTable, build_table, table_fingerprint


@dataclass
class LintOptions:
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    jobs: int = 0  # 0: automatic
    cache: bool = True
    cache_dir: Path | None = None
    diff_ref: str | None = None
    limits: Limits = field(default_factory=lambda: Limits())
    progress_after: float = 2.0  # seconds before a progress bar appears (terminal only)
    progress_console: object | None = None  # a rich Console to draw on (tests); else stderr
    # Files given one by one (pre-commit passes the changed files): also analyse the rest of
    # their project, for what the files call and what calls them (see `project_context`).
    context: bool = True
    # `commlint check -`: the name standard input goes by (`--stdin-filename`) and its bytes
    stdin: tuple[str, bytes] | None = None


# ------------------------------------------------------------------ selection
def _matches(code: str, spec: str) -> bool:
    return spec == "ALL" or code.startswith(spec)


def _specificity(spec: str) -> int:
    return 0 if spec == "ALL" else len(spec)


def enabled_codes(config: LintConfig, opts: LintOptions) -> set[str]:
    """ruff's semantics, layer by layer (the configuration, then the command line): a layer's
    `select` replaces the selection, its `extend-select` adds to it, its `ignore` removes from
    it; within a layer the more specific selector wins (`--select CL1 --ignore CL10
    --extend-select CL101` enables CL101 and CL11x), and on a tie `ignore` wins."""
    from commlint.rules import all_rules

    codes = [r.code for r in all_rules().values() if r.kind == "source"]
    chosen = {c for c in codes if _matches(c, "CL1")}
    layers = (
        (config.select, config.extend_select, config.ignore),
        (opts.select, opts.extend_select, opts.ignore),
    )
    for select, extend, ignore in layers:
        adds = [s.upper() for s in [*(select or []), *extend]]
        removes = [s.upper() for s in ignore]
        updates: dict[str, bool] = {}
        for level in sorted({_specificity(s) for s in adds + removes}):
            for spec, on in [(s, True) for s in adds] + [(s, False) for s in removes]:
                if _specificity(spec) == level:
                    updates.update((c, on) for c in codes if _matches(c, spec))
        base = set() if select is not None else chosen
        chosen = {c for c in codes if updates.get(c, c in base)}
    return chosen


# ------------------------------------------------------------------ extraction
@cache
def _table(extra_key: str) -> ApiTable:
    import json

    return build_table(json.loads(extra_key))


# ------------------------------------------------------------------ limits
# Measured by bench/lint_limits.py (CPython 3.11, 8 MB main-thread stack; first for LibCST,
# which the extractor read until 2026-11-27): the extractor, which recurses once per level,
# handles a syntax tree MAX_DEPTH deep; CPython itself refuses more than 200 nested brackets
# and ~3,000 levels of any expression. The limits are kept as they were measured.
MAX_DEPTH = 1000
RISKY_DEPTH = 200  # deeper files are parsed in a child process on the serial path
MAX_BYTES = 2_000_000  # (LibCST needed ~0.9 GB of memory per MB of source; kept)
TIME_LIMIT = 60.0  # CPU s per file (pydoc_data/topics.py, the slowest stdlib file: ~7 s)


@dataclass(frozen=True)
class Limits:
    max_bytes: int = MAX_BYTES
    max_depth: int = MAX_DEPTH
    time_limit: float = TIME_LIMIT  # CPU seconds; 0 = none

    def key(self) -> str:
        return f"{self.max_bytes}/{self.max_depth}"


class _TimeUp(Exception):
    pass


T = TypeVar("T")
PARSE_STACK = 512 << 20  # bytes of stack for the parsing thread (virtual: touched pages only)
PARSE_RECURSION = 20_000


def run_deep(fn: Callable[[], T], seconds: float) -> T:
    """`fn()` in a thread with a large stack and recursion limit (the extractor recurses once
    per nesting level; `pydoc_data/topics.py`'s concatenated strings alone went past Python's
    default limit). After `seconds` of CPU time `_TimeUp` is raised in
    that thread."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=body, name="commlint-parse", daemon=True)
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, PARSE_RECURSION))
    old_stack = threading.stack_size(PARSE_STACK)
    try:
        worker.start()
    finally:
        threading.stack_size(old_stack)
    start = time.process_time()
    try:
        stopped_at: float | None = None
        while worker.is_alive():
            if stopped_at is not None:
                worker.join(max(0.1, 10.0 - (time.monotonic() - stopped_at)))
                if worker.is_alive() and time.monotonic() - stopped_at >= 10.0:
                    raise _TimeUp  # stuck in native code: the thread is abandoned
                continue
            spent = time.process_time() - start
            if seconds <= 0:
                worker.join()
            elif spent < seconds:
                worker.join(seconds - spent)
            else:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(worker.ident or 0), ctypes.py_object(_TimeUp)
                )
                stopped_at = time.monotonic()
    finally:
        sys.setrecursionlimit(old_limit)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _longest_line(source: str) -> int:
    lines = source.splitlines() or [""]
    return max(range(len(lines)), key=lambda k: len(lines[k])) + 1


def _too_large(path: str, module: str, size: int, limits: Limits) -> FileFacts:
    why = (
        f"too large to analyse ({size / 1e6:.1f} MB; the limit is {limits.max_bytes / 1e6:.1f} MB)"
    )
    return FileFacts(path=path, module=module, functions={}, not_analysed=(1, 1, why))


@dataclass
class _Checked:
    """A file CPython accepts, with CPython's tree, ready for the extractor."""

    source: str
    depth: int
    deepest_line: int
    names: Names | None = None  # the bindings of CPython's tree, for the extractor
    tree: ast.Module | None = None  # CPython's tree itself: the extractor walks it


def precheck(
    path: str, module: str, data: bytes, extra_key: str, limits: Limits
) -> FileFacts | _Checked:
    """Everything that is cheap and cannot crash: size, encoding, the prefilter, CPython's own
    verdict on the syntax (CL100 only where CPython rejects the file), the nesting depth."""

    def facts(**kw: object) -> FileFacts:
        return FileFacts(path=path, module=module, functions={}, **kw)  # type: ignore[arg-type]

    if len(data) > limits.max_bytes:
        return _too_large(path, module, len(data), limits)
    try:
        source = decode_source(data).text
    except Unreadable as exc:
        return facts(syntax_error=(exc.line, 1, exc.message))
    if not _table(extra_key).prefilter.search(source):
        return facts(skipped=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes (before 3.12)
        msg = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        line, col = getattr(exc, "lineno", None), getattr(exc, "offset", None) or 1
        if line is None and "\0" in source:  # CPython does not say where the null byte is
            nul = source.find("\0")
            line, col = source.count("\n", 0, nul) + 1, nul - source.rfind("\n", 0, nul)
        return facts(syntax_error=(line or 1, max(col, 1), f"syntax error: {msg}"))
    except (RecursionError, MemoryError):
        return facts(
            not_analysed=(
                _longest_line(source),
                1,
                "too deeply nested to analyse (CPython itself cannot build its syntax tree)",
            )
        )
    names = Names(tree)  # the same walk measures the depth
    depth, line = names.depth, names.deepest_line
    if depth > limits.max_depth:
        return facts(
            not_analysed=(
                line,
                1,
                f"too deeply nested to analyse (syntax tree {depth} levels deep here, "
                f"the limit is {limits.max_depth})",
            )
        )
    return _Checked(source, depth, line, names, tree)


def analyse(path: str, module: str, checked: _Checked, extra_key: str, limits: Limits) -> FileFacts:
    """The extractor on CPython's tree, under the CPU time limit."""

    def not_analysed(line: int, col: int, msg: str) -> FileFacts:
        return FileFacts(path=path, module=module, functions={}, not_analysed=(line, col, msg))

    # the extractor loads here, on a cache miss: a run whose files are all cached never
    # pays its import
    from commlint.lint.extract import Extractor

    try:
        extractor = Extractor(
            path, module, checked.source, _table(extra_key), checked.names, checked.tree
        )
        tree, checked.names, checked.tree = checked.tree, None, None
        facts = run_deep(extractor.run, limits.time_limit)
        store = open_store()
        if store is not None and tree is not None and communicates(facts):
            store.keep(path, checked.source, tree)  # for the per-rank evaluator
        return facts
    except _TimeUp:
        return not_analysed(
            1, 1, f"too slow to analyse (stopped after {limits.time_limit:g} s of CPU time)"
        )
    except RecursionError:
        return not_analysed(
            checked.deepest_line,
            1,
            f"too deeply nested to analyse (syntax tree {checked.depth} levels deep here)",
        )
    except Exception as exc:  # a bug of ours must not stop the other files from being checked
        if os.environ.get("COMMLINT_DEBUG"):
            raise
        return FileFacts(
            path=path, module=module, functions={}, internal_error=f"{type(exc).__name__}: {exc}"
        )


def extract(
    path: str, module: str, data: bytes, extra_key: str, limits: Limits | None = None
) -> FileFacts:
    """One file's facts. Never raises for bad input: a syntax error is part of the facts."""
    limits = limits or Limits()
    with paused_gc():
        checked = precheck(path, module, data, extra_key, limits)
        if isinstance(checked, FileFacts):
            return checked
        return analyse(path, module, checked, extra_key, limits)


Task = tuple[str, str, bytes, str, Limits]


def _extract_job(args: Task) -> FileFacts:
    return extract(*args)


def extract_isolated(task: Task) -> FileFacts:
    """`extract` in a child process: a native crash (or the OOM killer) costs this file only."""
    path, module = task[0], task[1]
    wall = max(60.0, task[4].time_limit * 3 + 30) if task[4].time_limit > 0 else None
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(x for x in (root, env.get("PYTHONPATH")) if x)
    code = "from commlint.lint.engine import _isolated_main; _isolated_main()"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            input=pickle.dumps(task),
            capture_output=True,
            timeout=wall,
            env=env,
        )
    except subprocess.TimeoutExpired:
        why = f"too slow to analyse (the parser ran past {wall:g} s)"
        return FileFacts(path=path, module=module, functions={}, not_analysed=(1, 1, why))
    if proc.returncode == 0:
        try:
            return pickle.loads(proc.stdout)
        except Exception:  # a garbled answer is reported below, not raised
            pass
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = "unknown"
        why = f"not analysed: the parser crashed (signal {-proc.returncode}, {name})"
    else:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        why = f"not analysed: the parser process failed (exit {proc.returncode}: {tail[0]})"
    return FileFacts(path=path, module=module, functions={}, not_analysed=(1, 1, why))


def _isolated_main() -> None:
    task = pickle.loads(sys.stdin.buffer.read())
    facts = _extract_job(task)
    sys.stdout.buffer.write(pickle.dumps(facts, protocol=pickle.HIGHEST_PROTOCOL))


def _extract_serial(task: Task) -> FileFacts:
    """In this process, unless the pre-check finds the file risky for the native parser."""
    path, module, data, extra_key, limits = task
    with paused_gc():
        checked = precheck(path, module, data, extra_key, limits)
        if isinstance(checked, FileFacts):
            return checked
        if checked.depth > RISKY_DEPTH:
            return extract_isolated(task)
        return analyse(path, module, checked, extra_key, limits)


def _extract_parallel(todo: list[Task], jobs: int, keep: Callable[[FileFacts], None]) -> None:
    """A pool, a few tasks in flight per worker. When a worker dies (a native crash), every
    task that was in flight is re-run in a child process of its own, which names the file that
    crashed; the other files go on in a fresh pool."""
    pending = list(reversed(todo))
    window = jobs * 2
    while pending:
        in_flight: dict[Future[FileFacts], Task] = {}
        try:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                while pending or in_flight:
                    while pending and len(in_flight) < window:
                        task = pending[-1]
                        in_flight[pool.submit(_extract_job, task)] = task
                        pending.pop()
                    done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                    for fut in done:
                        ff = fut.result()
                        del in_flight[fut]
                        keep(ff)
        except BrokenProcessPool:
            for fut, task in in_flight.items():
                if fut.done() and fut.exception() is None:
                    keep(fut.result())
                else:
                    keep(extract_isolated(task))


@cache
def _extractor_fingerprint() -> str:
    """The extraction code itself is part of the cache key (facts change when it does)."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    extractor = sorted(p.name for p in here.glob("extract*.py"))  # extract.py and its parts
    for name in (*extractor, "names.py", "source_map.py", "ir.py", "table.py", "api_table.yaml"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def _renamed(ff: FileFacts, path: str) -> FileFacts:
    """Cached facts under the name this run gives the file."""
    if ff.path == path:
        return ff
    functions = {k: replace(f, path=path) for k, f in ff.functions.items()}
    return replace(ff, path=path, functions=functions)


class Cache:
    """Extracted facts per file, keyed by content hash + table/config + commlint version."""

    def __init__(self, folder: Path, fingerprint: str) -> None:
        self.folder = folder / __version__
        self.fingerprint = fingerprint

    def key(self, path: str, module: str, data: bytes) -> str:
        h = hashlib.sha256(data)
        # the file, however it is named: `check .` names it `./pkg/a.py`, a pre-commit run's
        # context the absolute path (the facts are renamed on a hit)
        where = os.path.abspath(path)
        h.update(f"\0{where}\0{module}\0{self.fingerprint}\0{__version__}".encode())
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


# ------------------------------------------------------------------ progress
class _Progress:
    """A rich progress bar with an ETA on stderr, shown only when stderr is a terminal and the
    run has already taken `after` seconds (short runs and pipes stay silent)."""

    def __init__(self, total: int, after: float, console: object | None = None) -> None:
        self.total = total
        self.after = after
        self.console = console
        self.start = time.monotonic()
        self.done = 0
        self.bar: object | None = None
        self.task: object | None = None
        if console is None and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
            self.total = 0  # never shown

    def advance(self) -> None:
        self.done += 1
        if self.total <= 0:
            return
        if self.bar is None:
            if time.monotonic() - self.start < self.after or self.done >= self.total:
                return
            from commlint.progress import progress_bar

            self.bar = progress_bar("commlint check", "files", self.console)
            self.bar.start()  # type: ignore[attr-defined]
            self.task = self.bar.add_task("lint", total=self.total, completed=self.done)  # type: ignore[attr-defined]
            return
        self.bar.update(self.task, completed=self.done)  # type: ignore[attr-defined]

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()  # type: ignore[attr-defined]
            self.bar = None


# ------------------------------------------------------------------ main entry
def lint_paths(paths: list[str], config: LintConfig, opts: LintOptions) -> Report:
    """The report of `paths` (files and folders) under `config` and `opts`."""
    with survivors_kept_apart() as survivors, kept_trees():
        return _lint_paths(paths, config, opts, survivors)


def _lint_paths(
    paths: list[str], config: LintConfig, opts: LintOptions, survivors: Survivors
) -> Report:
    import json

    from commlint.rules import all_rules

    report = Report()
    stdin_name, stdin_data = opts.stdin or (None, b"")
    if stdin_name is not None:
        files, excluded = [Path(stdin_name)], set()
    else:
        files, errors, excluded = discover(paths, config)
        report.errors.extend(errors)
    given = {str(f.resolve()) for f in files if str(f) not in excluded}
    context: set[str] = set()
    callers: set[str] = set()
    named_files = (
        stdin_name != "-" if stdin_name else bool(paths) and all(map(os.path.isfile, paths))
    )
    if opts.context and named_files:
        texts = {}
        if stdin_name:
            texts[str(Path(stdin_name).resolve())] = stdin_data.decode("utf-8", "replace")
        files, context, callers = project_context(files, config, texts)
        excluded |= context
    extra_key = json.dumps(config.table_extra, sort_keys=True, default=str)
    table = _table(extra_key)
    limits = opts.limits
    cache_obj = (
        Cache(
            opts.cache_dir or config.root / ".commlint_cache",
            table_fingerprint(config.table_extra) + limits.key(),
        )
        if opts.cache
        else None
    )
    facts: list[FileFacts] = []
    todo: list[Task] = []
    keys: dict[str, str] = {}
    # the facts read from the cache hold no cycles: the collector walking them as they are
    # unpickled was most of a cached run's reading (1.3 of 1.6 CPU s on 1,235 files)
    with paused_gc():
        for f in files:
            path = str(f)
            module = module_name(_relative(f, config.root))
            if path == stdin_name and f is files[0]:
                todo.append((path, module, stdin_data, extra_key, limits))  # never cached
                continue
            try:
                size = os.path.getsize(path)
                if size > limits.max_bytes:  # not read at all
                    facts.append(_too_large(path, module, size, limits))
                    continue
                data = f.read_bytes()
            except OSError as exc:
                if path not in excluded:
                    message = f"cannot read: {exc.strerror}"
                    report.errors.append(InputError(path=path, message=message))
                continue
            if cache_obj is not None:
                key = cache_obj.key(path, module, data)
                hit = cache_obj.get(key)
                if hit is not None:
                    facts.append(_renamed(hit, path))
                    continue
                keys[path] = key
            todo.append((path, module, data, extra_key, limits))
        survivors.freeze()  # before the collector is back: else its first pass walks them all
    jobs = opts.jobs if opts.jobs > 0 else (os.cpu_count() or 1)
    fresh: list[FileFacts] = []
    progress = _Progress(len(todo), opts.progress_after, opts.progress_console)

    def keep(ff: FileFacts) -> None:
        fresh.append(ff)
        progress.advance()
        # a file left unanalysed is not cached: its verdict depends on time and limits
        if cache_obj is not None and ff.path in keys and ff.not_analysed is None:
            cache_obj.put(keys[ff.path], ff)

    try:
        if jobs > 1 and len(todo) >= 16:
            with paused_gc():  # the workers' facts are unpickled here (no cycles either)
                _extract_parallel(todo, jobs, keep)
        else:
            for t in todo:
                keep(_extract_serial(t))
    finally:
        progress.close()
    facts.extend(fresh)
    survivors.freeze()  # the facts live until the report
    collector_off_for_the_rest()
    facts.sort(key=lambda x: x.path)
    report.checked = sum(f.path not in excluded for f in facts)

    enabled = enabled_codes(config, opts)
    program = Program(
        facts,
        table,
        {
            "explicit_group_required": config.explicit_group_required,
            "world_sizes": getattr(config, "world_sizes", None),
            # with project context, only the given files (and the callers a finding can be
            # caused in) are evaluated rank by rank
            "evaluate_only": ({f.path for f in facts} - context) | callers if context else None,
            "jobs": jobs,  # the per-rank evaluation's processes, as the extraction's
        },
    )
    raw: list[RawFinding] = []
    rules = all_rules()
    for ff in facts:
        for code, problem, fix in (
            (
                "CL100",
                ff.syntax_error,
                "Fix the file so that it parses (`python -m py_compile FILE` shows the error).",
            ),
            ("CL114", ff.not_analysed, _not_analysed_fix(ff.not_analysed, rules["CL114"].fix)),
        ):
            if problem is not None and code in enabled:
                line, col, msg = problem
                raw.append(
                    RawFinding(
                        code,
                        f"{msg}; the file was not checked",
                        ff.path,
                        Pos(line, col, line, col + 1, line),
                        fix,
                    )
                )
    for ff in facts:
        if ff.internal_error is not None and ff.path not in excluded:
            report.errors.append(
                InputError(
                    path=ff.path,
                    message=f"internal error while analysing: {ff.internal_error} "
                    "(please report it)",
                )
            )
    for code in sorted(enabled):
        rule = rules[code]
        if rule.check is None:
            continue
        try:
            with paused_gc():  # garbage in cycles is collected between rules
                raw.extend(rule.check(program))
        except Exception as exc:
            if os.environ.get("COMMLINT_DEBUG"):
                raise
            # Name the file: re-run the rule on each file alone (only after a failure).
            culprit = _failing_file(rule, facts, table, program.options)
            report.errors.append(
                InputError(
                    path=culprit,
                    message=f"internal error in rule {code}: {type(exc).__name__}: {exc} "
                    "(please report it; the other rules' findings are reported)",
                )
            )
    if excluded:
        # A finding in a context file is kept when it is caused through a given file: its
        # message names a line of one (`via sync() … (helpers.py:5)`).
        through = _through(given) if context else None
        raw = [
            r
            for r in raw
            if r.path not in excluded
            or (
                r.path in context
                and through is not None
                and any(m.group(1) != Path(r.path).name for m in through.finditer(r.message))
            )
        ]
        for r in raw:
            if r.path in context:
                r.path = os.path.relpath(r.path)
            r.related = [
                (os.path.relpath(path) if path in context else path, pos, msg)
                for path, pos, msg in r.related
            ]
    # a context file's noqa comment still suppresses what is located there, but is not itself
    # judged (CL113): the file was not given
    sources = Sources()
    if stdin_name is not None:
        try:
            sources.texts[stdin_name] = decode_source(stdin_data).text
        except Unreadable:
            sources.texts[stdin_name] = ""
    with paused_gc():  # tens of thousands of findings, in no cycle
        findings = apply_suppressions(
            raw, facts, enabled, excluded, config.per_file_ignores, sources
        )
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


def _failing_file(rule, facts: list[FileFacts], table: ApiTable, options: dict) -> str | None:
    """The first file on which `rule` alone raises, or None when none does alone."""
    for ff in facts:
        try:
            rule.check(Program([ff], table, options))
        except Exception:
            return ff.path
    return None


def _through(given: set[str]) -> re.Pattern[str] | None:
    names = sorted({Path(g).name for g in given})
    if not names:
        return None
    return re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r"):\d+")


def _not_analysed_fix(problem: tuple[int, int, str] | None, default: str) -> str:
    why = problem[2] if problem else ""
    if why.startswith("not analysed: the parser"):
        return (
            "Please report the crash with this file; meanwhile exclude it, or split its "
            "deepest expressions."
        )
    if why.startswith("too slow"):
        return "Split the file or its largest expressions, or exclude the file."
    return default


def _relative(f: Path, root: Path) -> str:
    try:
        return str(f.resolve().relative_to(root))
    except ValueError:
        return str(f)
