"""Round C of programs written in the styles outsiders write training code (issue 29), each
reduced from a public hang report cited in its header: a folder `tests/lint/recall/c_*/` holding
a training script and its helper modules (classes, config dataclasses, argparse). Each was
labelled by a real run with gloo on CPU at the `# nproc:` its main.py names (the outcome is in
its header). A line marked `# expect: CLnnn` must be reported, and nothing else; a folder
without marks (`*_ok`, the correct twin) must be clean."""

from __future__ import annotations

import pytest

from tests.lint.helpers import (
    assert_marked_findings,
    assert_twins_and_labels,
    lint_files,
    recall_cases,
)

CASES = recall_cases("c_")


@pytest.mark.parametrize("case", CASES)
def test_program_findings_are_the_marked_ones(case, tmp_path):
    assert_marked_findings(case, tmp_path)


def test_every_bug_has_a_correct_twin_and_every_program_its_label():
    assert_twins_and_labels(CASES, 2)


RANK_SET_PATIENCE = """
import torch.distributed as dist


def fit(model, patience):
    rank = dist.get_rank()
    best_epoch = 0
    for epoch in range(8):
        loss = model().reshape(1)
        dist.all_reduce(loss)
        if rank == 0 and float(loss) < 1.0:
            best_epoch = epoch
        if epoch - best_epoch >= patience:
            break
"""

RANK_SET_THEN_AGREED = """
import torch
import torch.distributed as dist


class Trainer:
    def __init__(self):
        self.rank = dist.get_rank()
        self.stop = False

    def fit(self, model, patience):
        bad = 0
        for epoch in range(8):
            loss = model().reshape(1)
            dist.all_reduce(loss)
            if self.rank == 0:
                bad = 0 if float(loss) < 1.0 else bad + 1
                self.stop = bad >= patience
            flag = [self.stop]
            dist.broadcast_object_list(flag, src=0)
            self.stop = flag[0]
            if self.stop:
                break
"""


def test_a_value_set_under_a_rank_branch_carries_the_rank(tmp_path):
    # best_epoch moves on rank 0 only: the other ranks break out of the loop early
    report = lint_files({"patience.py": RANK_SET_PATIENCE}, tmp_path)
    assert [(f.line, f.code) for f in report.findings] == [(14, "CL103")]


def test_a_rank_set_value_broadcast_before_use_is_clean(tmp_path):
    report = lint_files({"agreed.py": RANK_SET_THEN_AGREED}, tmp_path)
    assert report.findings == [], [f.message for f in report.findings]
