"""A loop that leaves on flags computed from a collective's result leaves on every rank
together, even when the collective is in another file's helper (megatron-core 0.16.1's
static generation loop: `broadcast_from_last_pipeline_stage` in communication_utils.py);
the same loop on flags of each rank's own is a hang (CL103)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

COMM = """\
import torch
import torch.distributed as dist


def broadcast_from_last_stage(tensor, group):
    last = dist.get_process_group_ranks(group)[-1]
    dist.broadcast(tensor, src=last, group=group)
    return {returned}
"""

GENERATE = """\
import torch
from torch.distributed import ProcessGroup

from pkg.comm import broadcast_from_last_stage


def sample(logits):
    return {draw}


def done_flags(tokens, pos, done, eod):
    return done | (tokens[:, pos] == eod)


def generate(model, prompts, pp_group: ProcessGroup, eod, max_len):
    tokens = model.pad(prompts, max_len)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    for pos in range(1, max_len):
        logits = broadcast_from_last_stage(model(tokens[:, :pos]), pp_group)
        tokens[:, pos] = sample(logits[:, -1, :])
        done = done_flags(tokens, pos, done, eod)
        if torch.all(done):
            break
    return tokens
"""
EXIT_LINE = 23

AGREED = {"returned": "tensor", "draw": "logits.argmax(dim=-1)"}


def check(tmp_path: Path, *files: str, **parts: str) -> list[tuple[str, int, str]]:
    values = {**AGREED, **parts}
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "comm.py").write_text(COMM.format(**values), encoding="utf-8")
    (pkg / "gen.py").write_text(GENERATE.format(**values), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "commlint", "check", "--no-cache", "--format", "json", *files],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode in (0, 1), out.stderr
    findings = json.loads(out.stdout)["findings"]
    return [(Path(f["path"]).name, f["line"], f["code"]) for f in findings]


@pytest.mark.parametrize("files", [["pkg"], ["pkg/gen.py"]], ids=["folder", "pre-commit"])
def test_flags_from_a_broadcast_in_another_file_agree(tmp_path, files):
    assert check(tmp_path, *files) == []


def test_flags_from_a_helper_that_returns_its_own_tensor_differ(tmp_path):
    # the helper broadcasts, but returns a tensor of this rank's own
    found = check(tmp_path, "pkg", returned="tensor.clone() + torch.rand(1)")
    assert ("gen.py", EXIT_LINE, "CL103") in found


def test_flags_sampled_from_the_default_generator_differ(tmp_path):
    # each process's default generator: sampled tokens, hence the flags, differ between ranks
    found = check(tmp_path, "pkg", draw="torch.multinomial(logits.softmax(-1), 1).view(-1)")
    assert ("gen.py", EXIT_LINE, "CL103") in found
