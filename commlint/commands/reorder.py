"""`python -m commlint.commands.reorder PLAN...`: each queue model's verdict on a plan, with
the reason (`commlint.graph.explain.explain_models`).

The command line lives in the command layer: the checker (`commlint.graph`) never loads plan
files, and never imports a command.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Print every model's verdict for each plan; exit 2 if any plan could not be read."""
    from commlint.findings import CommlintInputError
    from commlint.graph.explain import explain_models
    from commlint.plans.io import load_trace

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m commlint.commands.reorder PLAN...", file=sys.stderr)
        return 2
    status = 0
    for p in args:
        try:
            loaded = load_trace(p)
        except CommlintInputError as exc:
            print(exc, file=sys.stderr)
            status = 2
            continue
        print(f"{p}:")
        for line in explain_models(loaded.trace):
            print(f"  {line}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
