"""The user's line when ranks diverge: one call-site aligner (`commlint.graph.align`) for the
dry-run and the runtime guard; frames of installed packages are context, never the headline.

Synthetic traces for the aligner's decisions; real programs (a framework installed under a
`site-packages` folder whose `fit()` makes its own barrier, a rank-0-only `evaluate()` under
DDP) through `commlint run` and `torchrun -m commlint.guard` (marker `real`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cli_server import run_commlint
from warm_python import python_command

from bench.guard_jobs import command
from commlint.callsites import frame_kind, package_path
from commlint.findings import Finding
from commlint.graph.align import explain
from commlint.graph.check import check_trace
from commlint.guard.diagnose import mismatch_text
from commlint.trace import Action, Trace

HERE = Path(__file__).parent
ROOT = HERE.parent.parent

FRAMEWORK = """import torch
import torch.distributed as dist


class Callback:
    def on_epoch_end(self, trainer):
        pass


class Trainer:
    def __init__(self, callbacks=(), epochs=2):
        self.callbacks = list(callbacks)
        self.epochs = epochs

    @property
    def is_global_zero(self):
        return dist.get_rank() == 0

    def fit(self):
        for epoch in range(self.epochs):
            loss = torch.ones(4)
            dist.all_reduce(loss)
            for cb in self.callbacks:
                cb.on_epoch_end(self)
            self.strategy_barrier()

    def strategy_barrier(self):
        dist.barrier()
"""

CALLBACKS = """import torch.distributed as dist

from minifw import Callback


class SaveOnZero(Callback):
    def on_epoch_end(self, trainer):
        if trainer.is_global_zero:
            dist.barrier()
"""

TRAIN = """import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "env", "site-packages"))

import torch.distributed as dist  # noqa: E402
from minifw import Trainer  # noqa: E402

from my_callbacks import SaveOnZero  # noqa: E402

dist.init_process_group("gloo")
trainer = Trainer(callbacks=[SaveOnZero()])
trainer.fit()
dist.destroy_process_group()
"""


def write_app(folder: Path) -> Path:
    pkg = folder / "env" / "site-packages" / "minifw"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FRAMEWORK)
    (folder / "my_callbacks.py").write_text(CALLBACKS)
    (folder / "train.py").write_text(TRAIN)
    return folder / "train.py"


# -- frames -------------------------------------------------------------------------------


def test_frames_of_installed_packages_anywhere_are_not_the_users() -> None:
    import torch

    assert frame_kind("/tmp/x/env/site-packages/minifw/__init__.py") == "framework"
    assert frame_kind("/usr/lib/python3/dist-packages/lightning/trainer.py") == "framework"
    assert frame_kind(torch.__file__) == "torch"
    assert frame_kind(os.__file__) == "stdlib"
    assert frame_kind(str(ROOT / "commlint" / "guard" / "core.py")) == "commlint"
    assert frame_kind("/home/me/proj/train.py") == "user"
    assert package_path("/a/lib/python3.11/site-packages/lightning/x.py") == "lightning/x.py"


# -- the aligner on traces -----------------------------------------------------------------

C10D = "torch/distributed/distributed_c10d.py:1 in "


def _fw(op: str, line: int, func: str, **kw) -> Action:
    """A call the framework makes inside `trainer.fit()` at train.py:13."""
    return Action(
        op=op,
        site="train.py:13",
        stack=[C10D + op, "train.py:13 in <module>"],
        via=f"minifw/__init__.py:{line} in {func}",
        **kw,
    )


def _callback_trace() -> Trace:
    ar = _fw("all_reduce", 24, "fit", shape=[4], dtype="float32")
    fw_barrier = _fw("barrier", 30, "strategy_barrier")
    cb = Action(
        op="barrier",
        site="my_callbacks.py:9",
        stack=[C10D + "barrier", "my_callbacks.py:9 in on_epoch_end", "train.py:13 in <module>"],
    )
    return Trace(
        world_size=2,
        ranks={0: [ar, cb, fw_barrier, ar, cb, fw_barrier], 1: [ar, fw_barrier, ar, fw_barrier]},
    )


def _checked(trace: Trace) -> list[Finding]:
    findings = check_trace(trace, "gloo", reorder=False, symmetry=False).findings
    return explain([f for f in findings if f.severity == "error"], trace)


def test_a_callback_barrier_pairing_with_the_frameworks_is_named_at_the_callback() -> None:
    trace = _callback_trace()
    before = [f.message for f in check_trace(trace, "gloo", reorder=False).findings]
    assert all("my_callbacks.py:9" not in m for m in before)  # the checker alone: fit's line
    (f,) = _checked(trace)
    assert (f.code, f.path, f.line) == ("CL203", "my_callbacks.py", 9)
    assert f.message.startswith(
        "rank 0 calls barrier(WORLD) at my_callbacks.py:9 (in `on_epoch_end`"
    )
    assert "a call rank 1 does not make" in f.message
    assert (
        "collective #2 on group 'WORLD' is barrier(WORLD), the framework's own call " in f.message
    )
    assert "(minifw/__init__.py:30 in strategy_barrier)" in f.message
    assert "pad" not in (f.fix or "").replace("not a tensor to pad", "")
    assert (f.actions[0].rank, f.actions[0].action) == (0, 1)


def _ddp_trace(eval_site: str = "ev.py:11") -> Trace:
    bucket = Action(
        op="all_reduce",
        shape=[36],
        dtype="float32",
        site="ev.py:23",
        stack=["torch/_tensor.py:614 in backward", "ev.py:23 in main"],
        label="DDP gradient bucket",
    )
    ev = Action(
        op="all_reduce",
        shape=[1],
        dtype="float32",
        site=eval_site,
        stack=[C10D + "all_reduce", f"{eval_site} in evaluate", "ev.py:26 in main"],
    )
    return Trace(world_size=2, ranks={0: [bucket, ev, bucket], 1: [bucket, bucket]})


def test_an_extra_evaluate_against_a_ddp_bucket_is_an_extra_call_not_padding() -> None:
    (f,) = [f for f in _checked(_ddp_trace()) if f.code in ("CL203", "CL204")]
    assert f.code == "CL203" and (f.path, f.line) == ("ev.py", 26)  # the `evaluate()` call
    assert "rank 0 calls all_reduce(WORLD) at ev.py:11 (in `evaluate`" in f.message
    assert "torch's own call (DDP gradient bucket)" in f.message
    assert "pad the last batch" not in (f.fix or "")


def test_one_call_site_with_different_sizes_keeps_the_size_diagnosis() -> None:
    def gather(n: int) -> Action:
        return Action(
            op="all_gather", shape=[n], site="t.py:5", stack=[C10D + "all_gather", "t.py:5 in f"]
        )

    trace = Trace(world_size=2, ranks={0: [gather(4)], 1: [gather(3)]})
    (f,) = _checked(trace)
    assert f.code == "CL204" and "pad the last batch" in (f.fix or "")


def test_two_user_lines_meeting_as_one_call_keep_the_code_but_not_the_padding() -> None:
    def bcast(n: int, line: int) -> Action:
        return Action(
            op="broadcast",
            root=0,
            shape=[n],
            site=f"t.py:{line}",
            stack=[C10D + "broadcast", f"t.py:{line} in f"],
        )

    trace = Trace(
        world_size=2, ranks={0: [bcast(4, 3), bcast(2, 9)], 1: [bcast(5, 5), bcast(2, 9)]}
    )
    (f,) = [f for f in _checked(trace) if f.code in ("CL203", "CL204")]
    assert f.code == "CL204"
    assert f.message.startswith("broadcast #1 on group 'WORLD' has different sizes")
    assert "pad" not in (f.fix or "")


def test_the_guards_fingerprint_mismatch_reads_back_where_the_calls_parted() -> None:
    """The guard sees the mismatch at collective #3 (barrier vs all_reduce); with each rank's
    earlier fingerprints it names the callback's barrier at #2."""
    fps = {}
    for r, actions in _callback_trace().ranks.items():
        fps[r] = [
            {**a.model_dump(exclude_none=True, by_alias=True, exclude={"group"}), "seq": k}
            for k, a in enumerate(actions)
        ]
    seq = 2
    seen = {r: fps[r][seq] for r in fps}
    history = {r: fps[r][:seq] for r in fps}
    plain = mismatch_text("WORLD", [0, 1], seq, seen, 2)
    assert "my_callbacks.py:9" not in plain
    text = mismatch_text("WORLD", [0, 1], seq, seen, 2, history)
    assert "CL203" in text and "rank 0 calls barrier(WORLD) at my_callbacks.py:9" in text
    assert "collective #2 on group 'WORLD' is barrier(WORLD), the framework's own call" in text
    assert "collective #3 on group 'WORLD' does not match" in text


# -- real programs -------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", COMMLINT_GUARD_TIMEOUT="2")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _dry_run(program: Path) -> subprocess.CompletedProcess:
    return run_commlint(
        ["run", "--nproc-per-node", "2", program.name],
        timeout=300,
        cwd=program.parent,
        env=_env(),
    )


def _guarded(program: Path) -> subprocess.CompletedProcess:
    """torchrun -m commlint.guard, torchrun and its ranks forked warm (tests/warm_python.py)."""
    return subprocess.run(
        command(program.name, guard=[], python=python_command()),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=program.parent,
        env=_env(),
    )


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_app(tmp_path_factory.mktemp("app"))


@pytest.fixture(scope="module")
def ddp_eval(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ddp")
    (folder / "ddp_eval.py").write_text((HERE / "ddp_eval.py").read_text())
    return folder / "ddp_eval.py"


FW_BARRIER = next(k for k, line in enumerate(FRAMEWORK.splitlines(), 1) if "dist.barrier()" in line)
FW_CONTEXT = f"the framework's own call (minifw/__init__.py:{FW_BARRIER} in strategy_barrier)"
CALLBACK_HEADLINE = "rank 0 calls barrier(WORLD) at my_callbacks.py:9 (in `on_epoch_end`"
EVAL_HEADLINE = "rank 0 calls all_reduce(WORLD) at ddp_eval.py:11 (in `evaluate`"


@pytest.mark.real
def test_dry_run_names_the_callback_line_under_an_installed_framework(app: Path) -> None:
    proc = _dry_run(app)
    assert proc.returncode == 1, proc.stderr[-2000:]
    first = proc.stdout.splitlines()[0]
    assert first.startswith("my_callbacks.py:9: CL203"), proc.stdout
    assert CALLBACK_HEADLINE in proc.stdout
    assert "under `if trainer.is_global_zero:` (my_callbacks.py:8)" in proc.stdout
    assert FW_CONTEXT in proc.stdout


@pytest.mark.real
def test_dry_run_reports_a_rank0_evaluate_under_ddp_as_an_extra_call(ddp_eval: Path) -> None:
    proc = _dry_run(ddp_eval)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0].startswith("ddp_eval.py:26: CL203"), proc.stdout
    assert EVAL_HEADLINE in proc.stdout
    assert "under `if dist.get_rank() == 0 and step == 1:` (ddp_eval.py:25)" in proc.stdout
    assert "CL204" not in proc.stdout and "pad the last batch" not in proc.stdout


@pytest.mark.real
def test_guard_names_the_callback_line_under_an_installed_framework(app: Path) -> None:
    proc = _guarded(app)
    assert proc.returncode != 0
    assert CALLBACK_HEADLINE in proc.stderr, proc.stderr[-3000:]
    assert FW_CONTEXT in proc.stderr


@pytest.mark.real
def test_guard_reports_a_rank0_evaluate_under_ddp_as_an_extra_call(ddp_eval: Path) -> None:
    proc = _guarded(ddp_eval)
    assert proc.returncode != 0
    assert EVAL_HEADLINE in proc.stderr, proc.stderr[-3000:]
    assert "CL204" not in proc.stderr and "pad the last batch" not in proc.stderr


def test_a_large_group_is_aligned_on_one_rank_per_distinct_call() -> None:
    step = Action(op="all_reduce", site="t.py:5", stack=[C10D + "x", "t.py:5 in <module>"])
    extra = Action(op="barrier", site="cb.py:3", stack=[C10D + "x", "cb.py:3 in cb"])
    ranks = {r: [step, step, step] for r in range(128)}
    ranks[0] = [step, extra, step, step]
    (f,) = [f for f in _checked(Trace(world_size=128, ranks=ranks)) if f.code == "CL203"]
    assert "rank 0 calls barrier(WORLD) at cb.py:3" in f.message
    assert "a call ranks 1-127 do not make" in f.message


@pytest.mark.real
def test_dry_run_names_a_lightning_callback_barrier_not_trainer_fit(tmp_path: Path) -> None:
    """Lightning 2.x installed in site-packages: a rank-0-only barrier in a callback pairs
    with the epoch loop's own broadcast; the finding is at the callback's line, naming
    Lightning's frame as context (before: CL203 at `trainer.fit(...)`)."""
    pytest.importorskip("lightning")
    for name in ("train.py", "my_callbacks.py"):
        (tmp_path / name).write_text((HERE / "lightning_app" / name).read_text())
    cmd = ["run", "--nproc-per-node", "2", "--timeout", "120"]
    proc = run_commlint([*cmd, "train.py"], timeout=600, cwd=tmp_path, env=_env())
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stdout.startswith("my_callbacks.py:8: CL203"), proc.stdout
    assert (
        "rank 0 calls barrier(WORLD) at my_callbacks.py:8 (in `on_train_epoch_end`" in proc.stdout
    )
    assert "the framework's own call (lightning/" in proc.stdout
