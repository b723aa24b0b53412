"""`commlint replay TRACE -o repro.py`: a standalone script reproducing the trace with gloo."""

from __future__ import annotations

import argparse
import sys

from commlint.findings import CommlintInputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="write a script that replays a trace's communication with gloo on CPU",
        description="Write a standalone script that performs exactly the trace's communication "
        "per rank with gloo on CPU. Run it with `torchrun --nproc-per-node N repro.py` or "
        "`python repro.py`; each rank reports whether it finished, hung or failed, and the "
        "script exits 0 when every rank finished, 1 on a hang, 3 on a failure "
        "(docs/replay.md).",
    )
    p.add_argument("trace", metavar="TRACE", help="trace / plan file")
    p.add_argument("-o", "--output", required=True, help="script to write, e.g. repro.py")
    p.add_argument(
        "--timeout", type=float, default=10.0, help="seconds before a blocked op counts as hung"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from commlint.plans.io import load_trace
    from commlint.plans.replay import write_replay

    try:
        loaded = load_trace(args.trace)
    except CommlintInputError as exc:
        print(f"commlint: error: {exc}", file=sys.stderr)
        return 2
    try:
        write_replay(loaded.trace, args.output, args.timeout, args.trace)
    except OSError as exc:
        print(f"commlint: error: {args.output}: cannot write: {exc.strerror}", file=sys.stderr)
        return 2
    n = loaded.trace.world_size
    print(
        f"wrote {args.output}: run `torchrun --nproc-per-node {n} {args.output}`", file=sys.stderr
    )
    return 0
