"""Programs of the hidden recall set's families (issue 29) in the styles outsiders write them:
each a folder `tests/lint/recall/b_*/` holding a training script and its helper modules
(classes, config dataclasses, argparse, framework hooks in a second file). Each was labelled by
a real run with gloo on CPU at the `# nproc:` its main.py names (the outcome is in its header;
DeepSpeed, not installed here, by reading its source). A line marked `# expect: CLnnn` must be
reported, and nothing else; a folder without marks (`*_ok`, the correct twin) must be clean."""

from __future__ import annotations

import pytest

from tests.lint.helpers import (
    assert_marked_findings,
    assert_twins_and_labels,
    lint_files,
    recall_cases,
)

CASES = recall_cases("b_")


@pytest.mark.parametrize("case", CASES)
def test_program_findings_are_the_marked_ones(case, tmp_path):
    assert_marked_findings(case, tmp_path)


def test_every_bug_has_a_correct_twin_and_every_program_its_label():
    assert_twins_and_labels(CASES, 10)


LOOP_SIGNALS_UNIFORM = """
import lightning as L
from transformers import TrainerCallback


class BudgetModule(L.LightningModule):
    def training_step(self, batch, batch_idx):
        self.seen = len(batch)  # a size: alike on every rank under DistributedSampler
        return batch.sum()

    def on_train_batch_start(self, batch, batch_idx):
        if batch_idx >= 10 or self.seen < 4:
            return -1


class EvalStop(TrainerCallback):
    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        # transformers gathers the evaluation over every rank: the same metrics everywhere
        if metrics["eval_loss"] > 3.0:
            control.should_training_stop = True


class LoggedStop(L.Callback):
    def on_validation_end(self, trainer, pl_module):
        flag = pl_module.val_loss > 1.0
        flag = trainer.strategy.reduce_boolean_decision(flag, all=False)
        if flag:
            trainer.should_stop = True


class DivergenceStop(L.Callback):
    # Lightning 2.6's own LR finder: set on this rank's loss, then broadcast before the loop
    # reads it
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs["loss"].item()
        if loss > 4.0:
            trainer.should_stop = True
        trainer.should_stop = trainer.strategy.broadcast(trainer.should_stop)
"""


def test_loop_signals_on_values_every_rank_shares_are_clean(tmp_path):
    report = lint_files({"hooks.py": LOOP_SIGNALS_UNIFORM}, tmp_path)
    assert [(f.code, f.line) for f in report.findings] == []


def test_a_callback_return_value_is_not_a_signal(tmp_path):
    # Lightning ignores what a Callback's on_train_batch_start returns; a LightningModule's -1
    # ends the epoch on that rank
    src = """
import lightning as L
import torch.distributed as dist


class Skipper(L.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if dist.get_rank() == 0:
            return -1


class Module(L.LightningModule):
    def on_train_batch_start(self, batch, batch_idx):
        if self.global_rank == 0:
            return -1
"""
    report = lint_files({"hooks.py": src}, tmp_path)
    assert [(f.code, f.line) for f in report.findings] == [("CL103", 15)]
