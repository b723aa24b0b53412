"""`python ARGS` for the real-gloo tests' processes, forked from one warm interpreter.

A guard test's torchrun job starts three interpreters (torchrun's agent and two ranks), and
each imports torch (and, for DDP or an optimizer, torch._dynamo): ~1.5-3 of the ~2.5-3 CPU s
such a process costs, for a program of a few collectives. `python_command()` returns
`[python, -I, -S, this file, SOCKET]`, a stand-in for `[sys.executable]`: a client of a few
milliseconds that hands its argv, environment, working directory and standard streams (the
descriptors themselves) to a server per test worker that imported torch once; the server forks
a child that runs the command as `python ARGS` would: `-m module` or a script as `__main__`,
its folder or the working directory first on `sys.path`, then `PYTHONPATH`; `-u`; the
client's nice value; fresh seeds for `random` and numpy, as a new interpreter draws; in a
session of its own (torchrun starts each worker in one). The client forwards the signals it gets
(torchrun's SIGTERM to a worker) to the child's process group and ends as the child ended:
its exit code, or killed by the same signal (torchrun then reports "Signal 6 (SIGABRT)" as
for a real worker). A client killed outright (SIGKILL) has the server kill its child.

What differs from a fresh interpreter: the children share the server's string-hash seed
(`PYTHONHASHSEED`), so a `set` of strings iterates alike on every rank of a job (the guard's
test programs never iterate one); and a child's /proc/PID/environ is the server's (its
`os.environ` is the client's). Gloo, the program and the guard run for real, unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys

# What the guard's jobs import, imported once by the server (each costs every fresh rank).
PRELOAD = [
    "torch",
    "torch.distributed",
    "torch.distributed.launcher.api",  # torchrun's own module runs fresh, as `-m` runs it
    "torch.nn.parallel",
    "torch.optim",
    "torch._dynamo",
    "torch.distributed.device_mesh",
    "torch.distributed.tensor",
    "torch.distributed.fsdp",
    "torch.distributed.algorithms.join",
]
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)

_SERVER = None  # (Popen, socket path) of this process's server


def exit_status(exc: SystemExit) -> int:
    """The status python exits with on `exc` (a message is printed on stderr, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def python_command() -> list[str]:
    """The command that stands for `sys.executable`, served by this test worker's server."""
    import atexit
    import subprocess
    import tempfile

    global _SERVER
    if _SERVER is None or _SERVER[0].poll() is not None:
        path = os.path.join(tempfile.mkdtemp(prefix="commlint-warm-"), "socket")
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert server.stdout is not None
        if server.stdout.readline() != b"ready\n":
            raise RuntimeError("the warm python server did not start")
        atexit.register(_stop, server, os.path.dirname(path))
        _SERVER = (server, path)
    return [sys.executable, "-I", "-S", __file__, _SERVER[1]]


def _stop(server, folder: str) -> None:
    import shutil

    if server.stdin is not None:
        server.stdin.close()  # the server leaves, killing what it still runs
    server.wait()
    shutil.rmtree(folder, ignore_errors=True)


# --- the client: a few milliseconds of `python -I -S` ---------------------------------------


def _client(path: str, argv: list[str]) -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "nice": os.nice(0)}
    request = json.dumps(request)
    socket.send_fds(conn, [request.encode() + b"\n"], [0, 1, 2])
    answers = conn.makefile("rb")
    child: list[int] = []
    pending: list[int] = []

    def forward(sig: int, _frame: object) -> None:
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child[0], sig)
        else:
            pending.append(sig)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    line = answers.readline()
    if not line:
        sys.exit("warm python: the server is gone")
    child.append(int(line))
    for sig in pending:
        forward(sig, None)
    line = answers.readline()
    code = int(line) if line else 1
    if code < 0:  # killed by a signal: end the same way
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


# --- the server ---------------------------------------------------------------------------


def _serve(path: str) -> None:
    import importlib
    import select

    for name in PRELOAD:
        importlib.import_module(name)
    own = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    base = [p for p in sys.path[1:] if p not in own]  # the interpreter's own path
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    clients: dict[socket.socket, int] = {}  # a client's connection -> its child
    os.write(1, b"ready\n")
    while True:
        ready = select.select([0, listener, wake_r, *clients], [], [])[0]
        if 0 in ready and not os.read(0, 1024):  # the test worker is gone
            for pid in clients.values():
                _kill_group(pid)
            os.unlink(path)
            return
        if wake_r in ready:
            os.read(wake_r, 4096)
        if listener in ready:
            conn, _ = listener.accept()
            pid = _start(conn, listener, base, [wake_r, wake_w, *(c.fileno() for c in clients)])
            if pid:
                conn.sendall(f"{pid}\n".encode())
                clients[conn] = pid
            else:
                conn.close()
        for conn in [c for c in clients if c in ready]:
            if not conn.recv(1):  # the client was killed: so is its child
                _kill_group(clients[conn])
        while clients:  # reap, and tell each client how its child ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            for conn, child in list(clients.items()):
                if child == pid:
                    del clients[conn]
                    with contextlib.suppress(OSError):
                        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                    conn.close()


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            continue


def _start(conn: socket.socket, listener: socket.socket, base: list[str], close: list[int]) -> int:
    """Fork the child for one request; the child never returns."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while data and not data.endswith(b"\n"):
        more = conn.recv(1 << 16)
        if not more:
            break
        data += more
    if not data.endswith(b"\n") or len(fds) != 3:  # a client that died while asking
        for fd in fds:
            os.close(fd)
        return 0
    request = json.loads(data)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    try:
        listener.close()
        conn.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in close:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _become(request, base)
    finally:
        os._exit(1)


def _become(request: dict, base: list[str]) -> None:
    """Run `python ARGV` in this forked child; never return."""
    import atexit
    import io
    import runpy
    import threading

    os.setsid()
    with contextlib.suppress(OSError):  # `nice -n 10 CLIENT ...` runs the child niced too
        os.setpriority(os.PRIO_PROCESS, 0, request["nice"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = list(request["argv"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    while argv and argv[0] in ("-u", "-I", "-S", "-E", "-B", "-s"):
        unbuffered |= argv.pop(0) == "-u"  # interpreter flags: only -u matters here
    if not argv or (argv[0].startswith("-") and argv[0] != "-m"):
        print(f"warm python: only `[-u] -m module` or a script: {argv[:1]}", file=sys.stderr)
        os._exit(2)
    module = argv[1] if argv[:1] == ["-m"] else None
    script = None if module else argv[0]
    first = os.getcwd() if module else os.path.dirname(os.path.abspath(script))
    extra = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *base]
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = io.TextIOWrapper(
        open(1, "wb", buffering=0 if unbuffered else -1, closefd=False),  # noqa: SIM115
        write_through=unbuffered,
        line_buffering=os.isatty(1),
    )
    sys.stderr = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False),  # noqa: SIM115
        write_through=True,
        line_buffering=True,
        errors="backslashreplace",
    )
    # `random` reseeds itself in a forked child; numpy's global generator (torch imports
    # numpy) does not: a fresh interpreter's draw, not the server's
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:  # read by torch at its import, done here
        import torch

        torch.set_num_threads(int(threads))
    code = 0
    # What the program made stays referenced until the process ends, as `__main__`'s globals
    # do in an interpreter: freed here, DDP's reducer tears its gloo group down in a
    # destructor that waits, holding the GIL, for a gloo thread that needs it.
    kept: list[object] = []
    try:
        if module:
            sys.argv = [module, *argv[2:]]
            kept.append(runpy.run_module(module, run_name="__main__", alter_sys=True))
        else:
            sys.argv = argv
            kept.append(runpy.run_path(script, run_name="__main__"))
    except SystemExit as exc:
        kept.append(exc)
        code = exit_status(exc)
    except BaseException as exc:
        kept.append(exc)
        sys.excepthook(type(exc), exc, exc.__traceback__)  # torch's `[rankN]:` one included
        code = 1
        if isinstance(exc, KeyboardInterrupt):
            code = -signal.SIGINT
    threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit does
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2])
    else:
        _client(sys.argv[1], sys.argv[2:])
