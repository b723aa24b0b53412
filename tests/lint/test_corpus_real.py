"""The library facts the linter relies on, proved by real gloo runs: each corpus program below
that `# expect:`s a finding really hangs or fails, and its correct twin really finishes.

They cover what `api_table.yaml` and the per-rank evaluator say of torch (a rank-0-only
`dcp.save` is a collective that hangs; `gather_object`'s `dst` is a global rank, so a
subgroup without rank 0 raises; `reduce_scatter_tensor` needs one chunk size everywhere; a
collective in a context manager's `__exit__` runs on the ranks that entered it; a pipeline
schedule's `step()` exchanges activations and gradients with the neighbouring stages). One fork
server launches them all (torch imported once); ranks time out after a few seconds.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dryrun"))
from realrun import run_real, stop_fork_server

CORPUS = Path(__file__).with_name("corpus")
PROGRAMS = [
    "ctx_exit_collective_on_rank0.py",
    "ctx_exit_collective_ok.py",
    "dcp_save_on_rank0.py",
    "dcp_save_ok.py",
    "object_gather_dst_outside_group.py",
    "object_gather_group_dst_ok.py",
    "reduce_scatter_uneven_shards.py",
    "reduce_scatter_even_shards_ok.py",
    "pipelining_microbatches_differ.py",
    "pipelining_gpipe_ok.py",
    "pipelining_1f1b_step_skipped.py",
    "thread_collective_on_rank0.py",
    "thread_side_group_ok.py",
]
NPROC = re.compile(r"--nproc-per-node\s+(\d+)")
EXPECT = re.compile(r"#\s*expect:\s*((?:CL\d+\s*)+)")


def _is_bug(text: str) -> bool:
    """Marked with an error-severity code (a warning, such as CL112, is a risk, not a hang)."""
    from commlint.rules import all_rules

    rules = all_rules()
    codes = {c for m in EXPECT.finditer(text) for c in m.group(1).split()}
    return any(rules[c].severity == "error" for c in codes)


def _nproc(text: str) -> int:
    m = NPROC.search(text)
    return int(m.group(1)) if m else 2


@pytest.fixture(scope="module")
def runs():
    cases = [(str(CORPUS / n), _nproc((CORPUS / n).read_text(encoding="utf-8"))) for n in PROGRAMS]
    # a pipeline stage traces its module with dynamo on its first step: slow on a loaded machine
    got = run_real(cases, timeout=8.0)
    # A loaded machine can stretch a correct program past the short timeout: re-run once, one
    # at a time and with a long one, each correct program that did not finish. A bug still hangs.
    slow = [
        (p, n)
        for p, n in cases
        if not got[p].ok and not _is_bug(Path(p).read_text(encoding="utf-8"))
    ]
    if slow:
        got.update(run_real(slow, timeout=30.0, parallel=1))
    stop_fork_server()  # nothing of the real runs outlives them
    return {Path(k).name: v for k, v in got.items()}


@pytest.mark.parametrize("name", PROGRAMS)
def test_real_run_agrees_with_the_corpus_label(runs, name):
    text = (CORPUS / name).read_text(encoding="utf-8")
    run = runs[name]
    if _is_bug(text):
        assert not run.ok, f"{name} is marked as a bug but every rank finished: {run.ranks}"
    else:
        assert run.ok, f"{name} is correct code but a rank did not finish: {run.ranks}"
