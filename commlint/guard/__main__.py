"""`python -m commlint.guard [options] (train.py | -m module) ARGS...`: run a program under
the guard.

The script runs as `__main__` with `sys.argv = [train.py, *ARGS]`, exactly as
`python train.py ARGS...` would run it (`-m module` as `python -m module ARGS...` would);
guard options come before the script. Under torchrun, torchrun's own options stay before
`-m commlint.guard`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import sys

VALUED = ("--timeout", "--check", "--save-trace", "-m")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line, exit 2: a bad option never starts the program."""
        print(f"commlint guard: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m commlint.guard",
        usage="%(prog)s [options] (script.py | -m module) [ARGS...]\n"
        "       torchrun [torchrun options] -m commlint.guard [options] script.py [ARGS...]",
        description="Run a distributed PyTorch program for real, on its own backend, under "
        "the commlint guard: collective fingerprints are compared before a call can hang, "
        "and a stall is explained (and, when the checker proves it, ended) within seconds. "
        "See docs/guard.md.",
        epilog="Everything after the script (or -m module) goes to the program. torchrun's "
        "own options (--nproc-per-node, --standalone, ...) go before -m commlint.guard.",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        metavar="S",
        help="a call blocked this long starts a stall check (default 10, $COMMLINT_GUARD_TIMEOUT)",
    )
    p.add_argument(
        "--check",
        metavar="auto|all|sample:N|off",
        help="which collectives have their fingerprints compared (default auto)",
    )
    p.add_argument(
        "--save-trace",
        metavar="DIR",
        help="write DIR/commlint-guard-trace.yaml once there is a verdict, and at a clean exit",
    )
    p.add_argument(
        "--kill-stalled",
        action="store_true",
        default=None,
        help="end the job on a stall the checker cannot prove a hang (default: report it at a "
        "growing interval and let it run)",
    )
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m")
    return p


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """The guard's options, and the program with its arguments (untouched)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        name = argv[i].partition("=")[0]
        if name == "-m":
            return argv[: i + 2], argv[i + 2 :]
        if name in VALUED and "=" not in argv[i]:
            i += 1
        i += 1
    return argv[:i], argv[i:]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    options, program = split(argv)
    p = parser()
    opts = p.parse_args(options)  # usage errors: exit 2, before anything runs
    if opts.module is None and not program:
        p.error("no script given")
    if opts.module is not None:
        try:
            spec = importlib.util.find_spec(opts.module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            p.error(f"-m {opts.module}: no module named {opts.module!r}")
        target = spec.origin or opts.module
    else:
        target = program[0]
        program = program[1:]
        if not os.path.isfile(target):
            print(f"commlint guard: {target}: no such file", file=sys.stderr)
            raise SystemExit(2)
    from commlint.guard import CommlintGuardError, install, record_exception
    from commlint.guard.summary import print_exception

    try:
        install(
            timeout=opts.timeout,
            check=opts.check,
            save_trace=opts.save_trace,
            kill_stalled=opts.kill_stalled,
        ).options.sample_every()
    except ValueError as exc:
        p.error(str(exc))
    from commlint.callsites import USER_PROGRAMS

    # the program is the user's even when it lives among installed packages
    if os.path.isfile(target):
        USER_PROGRAMS.add(os.path.abspath(target))
    sys.argv = [target, *program]
    try:
        if opts.module is not None:
            sys.path[0] = os.getcwd()
            runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    except (SystemExit, KeyboardInterrupt) as exc:
        record_exception(exc)
        raise
    except BaseException as exc:
        record_exception(exc)
        print_exception(exc)  # the program's traceback, without the guard's frames
        if isinstance(exc, CommlintGuardError):
            # the guard's verdict: leave now, as a diagnosed hang does — tearing down groups
            # whose peers are leaving too has been seen to wait for the 30 s timeout
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
