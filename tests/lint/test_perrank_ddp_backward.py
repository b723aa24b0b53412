"""The per-rank evaluation follows `loss.backward()` after a DDP forward (the gradients'
all-reduce on the wrapper's group) instead of giving up on the file there."""

from __future__ import annotations

from pathlib import Path

from tests.lint.helpers import lint_source

TRAIN = """
import torch
import torch.distributed as dist


def main(rank, world_size):
    dp = dist.new_group(list(range(world_size)))
    net = torch.nn.Linear(8, 4)
    model = torch.nn.parallel.DistributedDataParallel(net, process_group=dp)
    gen = torch.Generator().manual_seed(7 + rank)
    probe_gen = torch.Generator().manual_seed(500 + rank)
    loss = torch.zeros(())
    for step in range(3):
        x = torch.randn(4, 8, generator=gen)
        probe = torch.rand(1, generator=probe_gen)
        if {cond}:
            loss = model(x).pow(2).mean()
            loss.backward()
        lossv = loss.detach().reshape(1)
        {fail}
        dist.all_reduce(lossv)


if __name__ == "__main__":
    dist.init_process_group("gloo")
    main(dist.get_rank(), dist.get_world_size())
"""


def _codes(tmp_path: Path, cond: str, fail: str = "") -> set[str]:
    text = TRAIN.format(cond=cond, fail=fail or "pass")
    return {f.code for f in lint_source(text, tmp_path).findings}


def test_a_rank_that_raises_after_backward_hangs_the_others(tmp_path: Path) -> None:
    fail = 'if rank == 1 and step == 1:\n            raise RuntimeError("bad batch")'
    assert "CL115" in _codes(tmp_path, "True", fail)


def test_a_data_test_every_rank_passes_is_refuted(tmp_path: Path) -> None:
    # torch.rand draws from [0, 1): `>= 0.0` holds on every rank, so every rank trains
    assert "CL102" not in _codes(tmp_path, "float(probe) >= 0.0")


def test_a_data_test_that_splits_the_ranks_is_still_reported(tmp_path: Path) -> None:
    assert "CL102" in _codes(tmp_path, "float(probe) > 0.5")
