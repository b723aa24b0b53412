"""The Python-side cost of one recorded call of the runtime guard, in one process.

    python bench/guard_call_cost.py [--depth 20] [--calls 16] [--steps 20] [--repeats 7]

A `Guard` with a ring and a side channel that keeps fingerprints in a dict (no TCP store: its
`set` is a send whose kernel work is not measured here) records `--calls` blocking all-gathers
per step through the guard's wrapper, as FSDP2 calls `dist.all_gather_single` (keywords
`group`, `async_op`), each made from under `--depth` frames of a file in torch's folder (as
FSDP2's hooks call them) below three frames of this script. Prints the CPU time of the
program's thread per recorded call (best and median of `--repeats`), the store's cost left
out: what the wrapper, reading the arguments, naming the user's line, the ring entry and the
fingerprint's check cost. (Before 2026-11-27 afternoon it called `Guard.run` directly, without
the wrapper and the reading of the arguments.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any


class _DictStore:
    """Each member's slot answers with this rank's own fingerprint: every call matches."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, text: str) -> None:
        self.values[key.rsplit("/", 1)[0]] = text

    def multi_set(self, keys: list[str], texts: list[str]) -> None:
        for key, text in zip(keys, texts, strict=True):
            self.set(key, text)

    def add(self, key: str, n: int) -> int:  # the request log's counter
        return 1

    def check(self, keys: list[str]) -> bool:
        return True

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [self.values[k.rsplit("/", 1)[0]].encode() for k in keys]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--calls", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    import torch

    from commlint import callsites
    from commlint.guard.core import Guard, Options
    from commlint.guard.ring import Ring

    guard = Guard(Options())
    guard.ring, guard.rank, guard.world_size = Ring(0), 0, 4
    guard.local.store = _DictStore()
    tensor = torch.zeros(1024)
    torch_frames: dict[str, Any] = {}
    source = "def deep(n, fn):\n    return fn() if n == 0 else deep(n - 1, fn)\n"
    exec(compile(source, callsites._torch_dir() + "commlint_bench.py", "exec"), torch_frames)

    def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
        return None  # torch's signature; the collective itself is not this bench's

    gather = guard.wrap("all_gather_single", all_gather_single)
    out = torch.zeros(4 * 1024)

    def one() -> None:
        gather(out, tensor, group=None, async_op=False)  # as FSDP2 calls it

    def step() -> None:
        for _ in range(args.calls):
            torch_frames["deep"](args.depth, one)

    for _ in range(5):  # `--check auto` learns the path
        step()
    per_call = []
    for _ in range(args.repeats):
        t0 = time.thread_time()
        for _ in range(args.steps):
            step()
        per_call.append((time.thread_time() - t0) / (args.steps * args.calls) * 1e6)
    print(
        f"per recorded call, {args.depth} torch frames deep: best {min(per_call):.1f} us, "
        f"median {statistics.median(per_call):.1f} us of the program's thread "
        f"({guard.fp_trusted} of {guard.fp_calls} fingerprints only recorded: a trusted path)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
