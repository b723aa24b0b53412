"""`python -m commlint.guard [options] train.py ARGS...`: run a script under the guard.

The script runs as `__main__` with `sys.argv = [train.py, *ARGS]`, exactly as
`python train.py ARGS...` would run it; options come before the script's path.
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = (
    "usage: python -m commlint.guard [--timeout SECONDS] [--check auto|all|sample:N|off] "
    "[--save-trace DIR] script.py [ARGS...]"
)
FLAGS = {"--timeout": "timeout", "--check": "check", "--save-trace": "save_trace"}


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Guard options, then the script and its arguments (untouched)."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        arg = argv[i]
        if arg in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        name, eq, value = arg.partition("=")
        if name not in FLAGS:
            raise SystemExit(f"commlint guard: unknown option {arg!r}\n{USAGE}")
        if not eq:
            if i + 1 >= len(argv):
                raise SystemExit(f"commlint guard: {name} needs a value\n{USAGE}")
            i += 1
            value = argv[i]
        opts[FLAGS[name]] = value
        i += 1
    if i >= len(argv):
        raise SystemExit(f"commlint guard: no script given\n{USAGE}")
    return opts, argv[i:]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, script_argv = parse(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            raise SystemExit(2) from None
        raise
    script = script_argv[0]
    if not os.path.isfile(script):
        print(f"commlint guard: {script}: no such file", file=sys.stderr)
        raise SystemExit(2)
    from commlint.guard import install, record_exception

    if "timeout" in opts:
        try:
            if float(opts["timeout"]) <= 0:
                raise ValueError
        except ValueError:
            print(
                f"commlint guard: --timeout must be a positive number of seconds, not "
                f"{opts['timeout']!r}",
                file=sys.stderr,
            )
            raise SystemExit(2) from None

    try:
        install(
            timeout=float(opts["timeout"]) if "timeout" in opts else None,
            check=opts.get("check"),
            save_trace=opts.get("save_trace"),
        ).options.sample_every()
    except ValueError as exc:
        print(f"commlint guard: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    from commlint.callsites import USER_PROGRAMS

    # the script is the user's even when it lives among installed packages
    USER_PROGRAMS.add(os.path.abspath(script))
    sys.argv = list(script_argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except BaseException as exc:
        record_exception(exc)
        raise


if __name__ == "__main__":
    main()
