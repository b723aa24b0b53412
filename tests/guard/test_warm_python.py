"""tests/warm_python.py stands in for `sys.executable` in the guard's real jobs: what a job
can see of its interpreter must be what a fresh `python ARGS` gives it."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

from warm_python import python_command

PROGRAM = textwrap.dedent(
    """\
    import os, random, sys
    import numpy
    print("argv", sys.argv[1:])
    print("cwd", os.getcwd())
    print("path0", sys.path[0])
    print("env", os.environ.get("WARM_TEST"))
    print("draw", random.random())
    print("numpy", numpy.random.random())
    print("line", os.getpid())
    what = sys.argv[1]
    if what == "raise":
        raise ValueError("boom")
    if what == "abort":
        sys.stdout.flush()
        os.abort()
    if what == "sleep":
        sys.stdout.flush()
        import time
        time.sleep(60)
    sys.exit(int(what))
    """
)


def _run(tmp_path: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    env = dict(os.environ, WARM_TEST="seen")
    return subprocess.run(
        [*python_command(), "-u", str(script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        **kw,
    )


def _field(out: str, name: str) -> str:
    return next(line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(name + " "))


def test_a_script_sees_its_argv_cwd_path_environment_and_exit_code(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "3", "x"), _run(tmp_path, "0")
    assert (a.returncode, b.returncode) == (3, 0), a.stderr
    assert _field(a.stdout, "argv") == "['3', 'x']"
    assert _field(a.stdout, "cwd") == str(tmp_path)
    assert _field(a.stdout, "path0") == str(tmp_path)  # the script's folder first
    assert _field(a.stdout, "env") == "seen"
    # each child is its own process with its own draw of `random`, as fresh interpreters are
    assert _field(a.stdout, "line") != _field(b.stdout, "line")
    assert _field(a.stdout, "draw") != _field(b.stdout, "draw")
    assert _field(a.stdout, "numpy") != _field(b.stdout, "numpy")


def test_an_exception_is_a_traceback_and_exit_1_a_signal_is_the_same_signal(tmp_path: Path):
    raised = _run(tmp_path, "raise")
    assert raised.returncode == 1
    assert "ValueError: boom" in raised.stderr and "Traceback" in raised.stderr
    aborted = _run(tmp_path, "abort")
    assert aborted.returncode == -signal.SIGABRT, aborted.stderr


def test_a_module_runs_as_main_with_the_working_directory_first(tmp_path: Path) -> None:
    (tmp_path / "mod_here.py").write_text("import sys\nprint(__name__, sys.path[0])\n")
    out = subprocess.run(
        [*python_command(), "-m", "mod_here"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["__main__", str(tmp_path)]


def test_sigterm_reaches_the_child_and_sigkill_of_the_client_ends_it(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(
            [*python_command(), "-u", str(script), "sleep"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        child = None
        for line in proc.stdout:
            if line.startswith("line "):
                child = int(line.split()[1])
                break
        assert child is not None
        proc.send_signal(sig)
        assert proc.wait(30) == -sig
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), f"the child of a client ended by {sig!r} still runs"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
