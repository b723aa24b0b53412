"""Replay (dl2 §4.3): write a standalone script that performs exactly a trace's communication.

The script runs each rank's actions in order with gloo on CPU (`torchrun --nproc-per-node N
repro.py`, or `python repro.py` to spawn the ranks itself) and reports per rank whether it
finished, hung (timed out) or failed, and at which action — so a reported deadlock is
reproduced in seconds, and the tests prove the checker's verdicts against real runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from commlint.trace import Trace

_RUNTIME = Path(__file__).with_name("replay_runtime.py")


def case_of(trace: Trace, name: str) -> dict:
    """The JSON-able form of one trace that the runtime executes."""
    return {
        "name": name,
        "world_size": trace.world_size,
        "groups": {k: list(v) for k, v in trace.groups.items()},
        "ranks": {
            str(r): [a.model_dump(by_alias=True, exclude_none=True) for a in acts]
            for r, acts in trace.ranks.items()
        },
    }


def render_replay(
    cases: list[dict], timeout: float = 10.0, origin: str = "", script: str = "repro.py"
) -> str:
    """Script text that replays `cases` (see `case_of`); `script` is the name it is saved as,
    for the instructions in its docstring."""
    runtime = _RUNTIME.read_text(encoding="utf-8")
    body = runtime[runtime.index('"""', 3) + 3 :].lstrip("\n")  # drop the module docstring
    sizes = sorted({c["world_size"] for c in cases})
    run = f"torchrun --nproc-per-node {sizes[0]} {script}"
    header = (
        f'"""Replay of {origin or "a commlint trace"}, written by `commlint replay`.\n\n'
        "Performs exactly the trace's communication per rank with gloo on CPU.\n"
        f"Run: {run}   (or: python {script})\n"
        f"Options: --timeout SECONDS (default {timeout:g}) --results DIR\n"
        'Each rank prints `COMMLINT-REPLAY {"status": ..., "action": i}` with the status\n'
        "finished, timeout (hung at action i), closed (a peer gave up on the connection while\n"
        "this rank waited at action i: the other side of a hang or a crash) or error (raised).\n\n"
        "Exit code: 0 every rank finished; 1 a hang (a rank timed out, saw its connection\n"
        "closed, or never reported); 2 usage error; 3 a failure (a rank raised or died).\n"
        "Under torchrun each rank exits with its own code, and torchrun fails if one does.\n"
        '"""\n'
    )
    data = json.dumps(cases, separators=(",", ":"))
    footer = (
        f"\n\nCASES = json.loads({data!r})\n\n"
        'if __name__ == "__main__":\n'
        f"    sys.exit(main(CASES, {timeout!r}))\n"
    )
    return header + body + footer


def write_replay(trace: Trace, out: str | Path, timeout: float = 10.0, name: str = "trace") -> None:
    text = render_replay([case_of(trace, name)], timeout, name, Path(out).name)
    Path(out).write_text(text, encoding="utf-8")


def run_cases(cases: list[dict], workdir: str | Path, timeout: float = 5.0) -> dict:
    """Run cases for real (one launch per world size); what each rank did, per case name.

    Returns `{case: {rank: {"status": finished|timeout|closed|error|crashed, "action": i|None}}}`.
    A rank whose process died (gloo aborts on some size mismatches) is `crashed` at the
    action it had started. Needs torch.
    """
    import subprocess
    import sys

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[int, dict]] = {}
    for w in sorted({c["world_size"] for c in cases}):
        batch = [c for c in cases if c["world_size"] == w]
        out = workdir / f"w{w}"
        out.mkdir(exist_ok=True)
        script = workdir / f"replay_w{w}.py"
        text = render_replay(batch, timeout, f"{len(batch)} cases", script.name)
        script.write_text(text, encoding="utf-8")
        subprocess.run(
            [sys.executable, str(script), "--results", str(out), "--timeout", str(timeout)],
            capture_output=True,
            text=True,
            timeout=len(batch) * (timeout * 4 + 60) + 120,
        )
        for rank in range(w):
            path = out / f"result.{rank}.jsonl"
            lines = path.read_text().splitlines() if path.exists() else []
            for line in lines:
                rec = json.loads(line)
                results.setdefault(rec["case"], {})[rank] = {
                    "status": rec["status"],
                    "action": rec["action"],
                    "message": rec["message"],
                }
            progress = out / f"progress.{rank}"
            if progress.exists():
                k, action = (int(x) for x in progress.read_text().split())
                name = batch[k].get("name", str(k))
                results.setdefault(name, {}).setdefault(
                    rank, {"status": "crashed", "action": action, "message": None}
                )
    return results
