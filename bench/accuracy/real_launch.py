"""One rank of a real-issue reproduction under torchrun: run the program, record what it did.

    torchrun --nproc-per-node N -m bench.accuracy.real_launch PROGRAM OUT_DIR

The program runs as `__main__` (its own `init_process_group`, gloo on CPU, its own timeout
from CASE_TIMEOUT_S). This rank's outcome goes to OUT_DIR/rank<R>.json:
- ok: the program returned (or exited with status 0);
- timeout: a collective or store wait of this rank timed out;
- peer_closed: a peer closed its connection while this rank waited on it;
- error: the program raised anything else, or exited with a non-zero status.

A rank that is done stays alive until every rank has reported (or a deadline passes): a rank
that exits at once closes its sockets and turns a peer's wait into "connection closed" before
the peer's own timeout, which hides what the peer was doing. It then leaves with os._exit(0),
so that torch/gloo's shutdown race (SIGABRT after every rank finished) cannot blur the outcome.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from pathlib import Path

TIMEOUT_MARKERS = ("timed out", "timeout")
PEER_MARKERS = ("connection closed", "connection reset", "broken pipe", "connection refused")


def classify(exc: BaseException) -> str:
    """timeout / peer_closed / error, from the exception's text."""
    text = str(exc).lower()
    if any(m in text for m in TIMEOUT_MARKERS):
        return "timeout"
    if any(m in text for m in PEER_MARKERS):
        return "peer_closed"
    return "error"


def _where(exc: BaseException, program: str) -> str:
    tb = exc.__traceback__
    line = ""
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(program):
            line = f"line {tb.tb_lineno}"
        tb = tb.tb_next
    return line


def run_rank(program: str, out_dir: Path) -> dict:
    """Run the program on this rank; its outcome."""
    rank = int(os.environ.get("RANK", "0"))
    # Import torch before the program starts and say so: on a loaded machine the imports
    # alone can outlast the outer timeout, and a rank that never started did not hang.
    import torch.distributed  # noqa: F401

    (out_dir / f"rank{rank}.started").touch()
    result: dict = {"rank": rank}
    began = time.monotonic()
    sys.argv = [program]
    try:
        runpy.run_path(program, run_name="__main__")
        result["status"] = "ok"
    except SystemExit as exc:
        ok = exc.code in (None, 0)
        result["status"] = "ok" if ok else "error"
        if not ok:
            result["error"] = f"SystemExit({exc.code})"
    except BaseException as exc:  # every failure of the program is data
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        result.update(
            status=classify(exc),
            error=f"{type(exc).__name__}: {first}",
            where=_where(exc, program),
        )
    result["seconds"] = round(time.monotonic() - began, 2)
    tmp = out_dir / f".rank{rank}.json"
    tmp.write_text(json.dumps(result))
    tmp.replace(out_dir / f"rank{rank}.json")
    return result


def linger(out_dir: Path, world_size: int, seconds: float) -> None:
    """Keep this rank's sockets open until every rank has reported, or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if len(list(out_dir.glob("rank*.json"))) >= world_size:
            return
        time.sleep(0.1)


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        print("usage: torchrun ... -m bench.accuracy.real_launch PROGRAM OUT_DIR", file=sys.stderr)
        os._exit(2)
    program, out = argv
    out_dir = Path(out)
    run_rank(program, out_dir)
    group_timeout = float(os.environ.get("CASE_TIMEOUT_S", "6"))
    linger(out_dir, int(os.environ.get("WORLD_SIZE", "1")), 4 * group_timeout + 20)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
