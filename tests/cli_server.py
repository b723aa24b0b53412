"""`python -m commlint ...` for tests, forked from one warm process per test worker.

Every `commlint run` started as a fresh interpreter imports torch and warms fake tensors
(~5 of the ~6 CPU s a 2-rank dry-run costs); the suite starts a few hundred. This server
imports torch and commlint and runs the dry-run's own warm-up once (`warm.warm_up`, what
`commlint run` does before it forks its ranks, and does not repeat in a warm process); each
command then runs in a child forked from it, as `python -m commlint ARGS` would run: its own
working directory (first on `sys.path`, as `-m` puts it), environment, argv, stdin from
/dev/null, stdout and stderr captured, `SystemExit` turned into the exit code, atexit
handlers run. The server is started by `subprocess`, never forked from the test process
(whose threads and locks a child would inherit). Use it where a test is about what the
command says and returns, not about the interpreter that runs it (its start-up, its imports).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from warm_python import exit_status

_LOCK = threading.Lock()
_SERVER: subprocess.Popen | None = None


def run_commlint(
    args: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess:
    """What `subprocess.run([sys.executable, "-m", "commlint", *args], capture_output=True,
    text=True, cwd=cwd, env=env, timeout=timeout)` returns, from a warm fork."""
    args = [str(a) for a in args]
    with _LOCK, tempfile.TemporaryDirectory(prefix="commlint-cli-") as scratch:
        server = _server()
        out, err = os.path.join(scratch, "out"), os.path.join(scratch, "err")
        request = {
            "argv": args,
            "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
            "env": dict(os.environ if env is None else env),
            "out": out,
            "err": err,
        }
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        answers = server.stdout.fileno()
        pid = int(_read_line(answers, None))
        line = _read_line(answers, timeout)
        if line is None:
            os.killpg(pid, signal.SIGKILL)
            _read_line(answers, None)
            raise subprocess.TimeoutExpired([sys.executable, "-m", "commlint", *args], timeout)
        code = int(line)
        encoding = locale.getpreferredencoding(False)
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "commlint", *args],
            code,
            Path(out).read_bytes().decode(encoding, "replace").replace("\r\n", "\n"),
            Path(err).read_bytes().decode(encoding, "replace").replace("\r\n", "\n"),
        )


def _read_line(fd: int, timeout: float | None) -> str | None:
    """One answer line, read a byte at a time (nothing of the next answer is read ahead, so
    a wait on the descriptor never misses a line already read); None after `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([fd], [], [], left)[0]:
            return None
        byte = os.read(fd, 1)
        if not byte:
            raise RuntimeError("the commlint test server died")
        line += byte
    return line.decode()


def _server() -> subprocess.Popen:
    global _SERVER
    if _SERVER is None or _SERVER.poll() is not None:
        _SERVER = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        atexit.register(_stop, _SERVER)
    return _SERVER


def _stop(server: subprocess.Popen) -> None:
    if server.stdin is not None:
        server.stdin.close()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


WARM_IMPORTS = [
    "commlint.commands.check",
    "commlint.commands.plan",
    "commlint.commands.replay",
    "commlint.commands.rules",
    "commlint.commands.run",
    "commlint.commands.run_coverage",
    "commlint.graph.align",
    "commlint.graph.check",
    "commlint.graph.reorder",
    "commlint.lint.engine",
    "commlint.lint.extract",
    "commlint.lint.perrank",
    "commlint.plans.dryrun.driver",
    "commlint.plans.dryrun.local_launcher",
    "commlint.plans.dryrun.merge",
    "commlint.report.json_format",
    "commlint.report.statistics",
    "commlint.report.text",
]


def _serve() -> None:
    """Read one request a line, fork a child for it, answer its pid, then its exit code."""
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    import commlint.cli  # noqa: F401
    from commlint.plans.dryrun.warm import warm_up

    warm_up("fake")
    # What the first command of a process imports (its command, the linter, the checker, the
    # reports): 0.2-0.35 CPU s that every forked command paid again.
    for name in WARM_IMPORTS:
        importlib.import_module(name)
    from commlint.rules import all_rules

    all_rules()
    # the interpreter's own path (site-packages ...), without this script's folder and
    # PYTHONPATH, which each command brings its own of
    own = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    base = [p for p in sys.path[1:] if p not in own]
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            answers.close()
            _child(request, base)
        answers.write(f"{pid}\n")
        _, status = os.waitpid(pid, 0)
        answers.write(f"{os.waitstatus_to_exitcode(status)}\n")


def _child(request: dict, base: list[str]) -> None:
    """Become `python -m commlint ARGV` in `cwd` with `env`; never return."""
    import atexit as child_atexit
    import runpy
    import traceback

    code = 1
    try:
        os.setpgid(0, 0)  # a timeout kills this command and whatever it started
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path in ((1, request["out"]), (2, request["err"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        extra = [os.path.abspath(p) for p in request["env"].get("PYTHONPATH", "").split(os.pathsep)]
        sys.path[:] = [request["cwd"], *[p for p in extra if p], *base]
        sys.argv = ["-m", *request["argv"]]
        threads = request["env"].get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:  # read by torch at its import, here done
            import torch

            torch.set_num_threads(int(threads))
        try:
            runpy.run_module("commlint", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exit_status(exc)
        except BaseException:
            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit does
        child_atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code & 0xFF)


if __name__ == "__main__":
    _serve()
