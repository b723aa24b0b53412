"""`commlint check` on hostile source: no crash, no hang, nothing silently passes.

Deep nesting, huge files, slow files, native parser crashes, FIFOs and symlink loops are each
reported at a location (CL100 where CPython rejects the file, CL114 where CPython accepts it but
commlint could not analyse it, or a one-line input error), and every other file is still
checked."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from commlint.lint import engine
from commlint.lint.config import LintConfig
from commlint.lint.engine import Limits, LintOptions, lint_paths

HEADER = "import torch.distributed as dist\nrank = dist.get_rank()\n"
BAD = """\
import torch.distributed as dist


def save(t):
    if dist.get_rank() == 0:
        dist.barrier()
"""
STDLIB = Path(os.__file__).parent


def write(root: Path, name: str, text: str) -> Path:
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def lint(root: Path, paths: list[str] | None = None, **opts) -> engine.Report:
    return lint_paths(paths or [str(root)], LintConfig(root=root), LintOptions(cache=False, **opts))


def cli(*argv: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "commlint", "check", "--no-cache", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )


def by_name(report) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in report.findings:
        out.setdefault(Path(f.path).name, []).append(f)
    return out


# The inputs that crashed LibCST's native parser (issue 13): each one is reported at its line.
HOSTILE = {
    "parens.py": HEADER + "x = " + "(" * 2000 + "1" + ")" * 2000 + "\n",
    "calls.py": HEADER + "x = " + "f(" * 5000 + "1" + ")" * 5000 + "\n",
    "ifexp.py": HEADER + "x = " + "1 if rank else " * 10000 + "2\n",
    "plus.py": HEADER + "x = " + " + ".join(["a"] * 8000) + "\n",
}


def test_inputs_that_crashed_the_native_parser_are_located_and_do_not_crash(tmp_path):
    for name, text in HOSTILE.items():
        write(tmp_path, name, text)
    write(tmp_path, "bad.py", BAD)
    proc = cli("--format", "json", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    got = {
        (Path(f["path"]).name, f["code"], f["line"]) for f in json.loads(proc.stdout)["findings"]
    }
    # CPython itself rejects more than 200 nested brackets: a syntax error at the line
    assert ("parens.py", "CL100", 3) in got and ("calls.py", "CL100", 3) in got
    # CPython cannot build the tree of the others either; not a syntax error: not analysed
    assert ("ifexp.py", "CL114", 3) in got and ("plus.py", "CL114", 3) in got
    assert ("bad.py", "CL101", 6) in got


def test_deep_tree_that_cpython_accepts_is_cl114_at_its_line(tmp_path):
    deep = (
        HEADER
        + "\n\ndef f(t):\n    dist.all_reduce(t)\n    return "
        + " + ".join(["t"] * 1500)
        + "\n"
    )
    write(tmp_path, "deep.py", deep)
    write(tmp_path, "bad.py", BAD)
    report = lint(tmp_path, select=["ALL"])
    hits = by_name(report)
    assert [(f.code, f.line) for f in hits["deep.py"]] == [("CL114", 7)]
    assert "too deeply nested" in hits["deep.py"][0].message
    assert [f.code for f in hits["bad.py"]] == ["CL101"]
    assert report.exit_code() == 1


def test_a_native_crash_in_a_worker_costs_that_file_only(tmp_path, monkeypatch):
    """One file kills its worker (as LibCST's parser did with SIGSEGV): the pool is re-run, the
    file is re-parsed alone in a child that also dies, and is reported with the signal; the
    24 other files' findings are all there."""
    for k in range(24):
        write(tmp_path, f"m{k:02}.py", BAD)
    write(tmp_path, "crash.py", BAD)
    real_extract, real_isolated = engine.extract, engine.extract_isolated

    def crashing_extract(path, *rest):
        if path.endswith("crash.py"):
            os.kill(os.getpid(), signal.SIGSEGV)  # in the forked worker
        return real_extract(path, *rest)

    class Segfault:  # unpickled in the isolated child, where it crashes the same way
        def __reduce__(self):
            return (ctypes.string_at, (0,))  # reads address 0: SIGSEGV

    def isolated(task):
        if task[0].endswith("crash.py"):
            task = (task[0], task[1], Segfault(), task[3], task[4])
        return real_isolated(task)

    monkeypatch.setattr(engine, "extract", crashing_extract)
    monkeypatch.setattr(engine, "extract_isolated", isolated)
    report = lint(tmp_path, jobs=2)
    hits = by_name(report)
    assert sum(1 for n in hits if n.startswith("m")) == 24
    assert all([f.code for f in hits[f"m{k:02}.py"]] == ["CL101"] for k in range(24))
    (crash,) = hits["crash.py"]
    assert crash.code == "CL114" and crash.line == 1
    assert "the parser crashed (signal 11, SIGSEGV)" in crash.message


def test_isolated_child_reports_the_signal(tmp_path):
    class Abort:
        def __reduce__(self):
            return (os.abort, ())

    ff = engine.extract_isolated(("x.py", "x", Abort(), "{}", Limits()))  # type: ignore[arg-type]
    assert ff.not_analysed is not None
    assert "signal 6, SIGABRT" in ff.not_analysed[2]


def test_serial_path_parses_risky_files_in_a_child(tmp_path, monkeypatch):
    risky = HEADER + "x = " + " + ".join(["a"] * (engine.RISKY_DEPTH + 20)) + "\n"
    write(tmp_path, "risky.py", risky)
    write(tmp_path, "bad.py", BAD)
    isolated: list[str] = []
    real = engine.extract_isolated

    def spy(task):
        isolated.append(Path(task[0]).name)
        return real(task)

    monkeypatch.setattr(engine, "extract_isolated", spy)
    report = lint(tmp_path, jobs=1, select=["ALL"])
    assert isolated == ["risky.py"]
    assert [f.code for f in report.findings] == ["CL101"]


def test_too_large_file_is_not_read_and_is_cl114(tmp_path, monkeypatch):
    write(tmp_path, "big.py", HEADER + "x = 1\n" * 2000)
    write(tmp_path, "bad.py", BAD)
    report = lint(tmp_path, limits=Limits(max_bytes=5000))
    hits = by_name(report)
    assert [(f.code, f.line) for f in hits["big.py"]] == [("CL114", 1)]
    assert "too large to analyse" in hits["big.py"][0].message
    assert [f.code for f in hits["bad.py"]] == ["CL101"]


def test_time_limit_stops_a_slow_file_with_a_located_note(tmp_path, monkeypatch):
    from commlint.lint import extract

    real_run = extract.Extractor.run

    def slow(self):
        if self.path.endswith("slow.py"):
            while True:  # burns CPU until the limit interrupts it
                pass
        return real_run(self)

    monkeypatch.setattr(extract.Extractor, "run", slow)
    write(tmp_path, "slow.py", BAD)
    write(tmp_path, "bad.py", BAD)
    report = lint(tmp_path, jobs=1, limits=Limits(time_limit=0.5))
    hits = by_name(report)
    assert [f.code for f in hits["slow.py"]] == ["CL114"]
    assert "too slow to analyse" in hits["slow.py"][0].message
    assert [f.code for f in hits["bad.py"]] == ["CL101"]
    assert threading.active_count() < 5


def test_nested_calls_are_analysed_in_linear_time(tmp_path):
    """Each call used to evaluate its arguments twice: 20 nested calls took over 60 s."""
    write(tmp_path, "calls.py", HEADER + "x = " + "f(" * 40 + "rank" + ")" * 40 + "\n")
    write(tmp_path, "bad.py", BAD)
    report = lint(tmp_path, jobs=1, limits=Limits(time_limit=20.0))
    hits = by_name(report)
    assert hits.get("calls.py", []) == []
    assert [f.code for f in hits["bad.py"]] == ["CL101"]


def test_a_file_too_slow_to_analyse_is_stopped_by_the_time_limit(tmp_path):
    """A long file past the CPU limit ends as a located CL114; the other files are checked."""
    write(tmp_path, "calls.py", HEADER + "x = f(g(rank), h(rank + 1))\n" * 12000)
    write(tmp_path, "bad.py", BAD)
    report = lint(tmp_path, jobs=1, limits=Limits(time_limit=1.0))
    hits = by_name(report)
    assert [(f.code, f.line) for f in hits["calls.py"]] == [("CL114", 1)]
    assert "too slow to analyse (stopped after 1 s of CPU time)" in hits["calls.py"][0].message
    assert [f.code for f in hits["bad.py"]] == ["CL101"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_named_py_is_skipped_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "x.py")
    write(tmp_path, "bad.py", BAD)
    proc = cli("--format", "json", str(tmp_path), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert f"{tmp_path / 'x.py'}: a FIFO; skipped" in proc.stderr
    assert [Path(f["path"]).name for f in json.loads(proc.stdout)["findings"]] == ["bad.py"]
    # named on the command line too
    proc = cli(str(tmp_path / "x.py"), str(tmp_path / "bad.py"), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "x.py: a FIFO; skipped" in proc.stderr
    assert "bad.py:6" in proc.stdout


def test_symlink_loops_are_located_notes_not_internal_errors(tmp_path):
    (tmp_path / "loop.py").symlink_to(tmp_path / "loop.py")
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    (tmp_path / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    write(tmp_path, "bad.py", BAD)
    proc = cli("--format", "json", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert f"{tmp_path / 'loop.py'}: symbolic link loop; skipped" in proc.stderr
    assert f"{tmp_path / 'a.py'}: symbolic link loop; skipped" in proc.stderr
    assert f"{tmp_path / 'dangling.py'}: broken symbolic link; skipped" in proc.stderr
    assert [Path(f["path"]).name for f in json.loads(proc.stdout)["findings"]] == ["bad.py"]
    proc = cli(str(tmp_path / "loop.py"), str(tmp_path / "bad.py"), cwd=tmp_path)
    assert proc.returncode == 2 and "loop.py: symbolic link loop; skipped" in proc.stderr
    assert "bad.py:6" in proc.stdout


def test_syntax_error_is_cl100_exactly_where_cpython_says(tmp_path):
    write(tmp_path, "broken.py", HEADER + "\n\ndef f(t):\n    return (t,\n\nx = 1 +\n")
    write(tmp_path, "nul.py", HEADER + "x = 1\ny = '\0'\n")
    report = lint(tmp_path)
    hits = by_name(report)
    for name in ("broken.py", "nul.py"):
        try:
            compile((tmp_path / name).read_text(), name, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            expected = getattr(exc, "lineno", None) or 4  # CPython omits the null byte's line
        assert [(f.code, f.line) for f in hits[name]] == [("CL100", expected)], name


@pytest.mark.parametrize("name", ["pydoc_data/topics.py", "test/test_grammar.py"])
def test_valid_stdlib_files_are_never_cl100(name, tmp_path):
    """Both were CL100 before (issue 16): CPython accepts them; and both are analysed (the
    extractor reads CPython's own tree: no construct CPython accepts is left out, where LibCST
    did not know one of test_grammar.py's)."""
    path = STDLIB / name
    if not path.is_file():
        pytest.skip(f"{name} not in this Python")
    report = lint(tmp_path, paths=[str(path)], select=["ALL"])
    assert report.errors == []
    assert [f.code for f in report.findings if f.code == "CL100"] == []
    assert [f.code for f in report.findings if f.code == "CL114"] == []
