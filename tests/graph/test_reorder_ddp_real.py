"""Real torch DDP on gloo (2 ranks): the bucket facts the DDP table in docs/nondeterminism.md
rests on, recorded by bench/ddp_buckets.py's comm hook and gradient hook."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ddp_buckets.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("ddp_buckets", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.real
@pytest.mark.timeout(300)
def test_small_buckets_expose_a_potential_deadlock_one_bucket_does_not():
    bench = load_bench()
    caps = (1, 64)
    recorded = bench.record(caps)
    for rank in (0, 1):
        for cap in caps:
            events = recorded[rank][cap][-1]
            order = [e[1] for e in events if e[0] == "bucket"]
            assert order == sorted(order), "DDP launches its buckets in index order"
            hook = next(k for k, e in enumerate(events) if e[0] == "hook")
            own = next(k for k, e in enumerate(events) if e[0] == "bucket" and e[3])
            assert hook < own, "the hook fires before DDP can launch its parameter's bucket"
    small, big = bench.table(recorded, caps)
    assert small["fused"] > big["fused"] == 1
    assert small["models"] == ["single-queue"] and not small["errors"]
    assert big["models"] == [] and not big["errors"]
