"""A class made inside a function: its methods read that function's variables (a closure),
so a generator the function seeded from the rank still draws each rank's own numbers there."""

from __future__ import annotations

from pathlib import Path

from tests.lint.helpers import lint_source

PROGRAM = """
import lightning as L
import torch
import torch.distributed as dist


def main(rank):
    probe_gen = torch.Generator().manual_seed({seed})

    class Module(L.LightningModule):
        def training_step(self, batch, step):
            probe = torch.rand(1, generator=probe_gen)
            if float(probe) > 0.5:
                self.all_gather(batch[0])
            return batch[0].sum()

    trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_epochs=1)
    trainer.fit(Module())


if __name__ == "__main__":
    dist.init_process_group("gloo")
    main(dist.get_rank())
"""


def _codes(tmp_path: Path, seed: str) -> set[str]:
    return {f.code for f in lint_source(PROGRAM.format(seed=seed), tmp_path).findings}


def test_a_generator_seeded_from_the_rank_outside_the_class(tmp_path: Path) -> None:
    assert "CL102" in _codes(tmp_path, "500 + rank")


def test_a_generator_seeded_alike_everywhere_outside_the_class(tmp_path: Path) -> None:
    assert "CL102" not in _codes(tmp_path, "500")
