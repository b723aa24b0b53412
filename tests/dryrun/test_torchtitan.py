"""torchtitan's own entry point (`torchtitan.train`, llama3 debug model) under the dry-run,
on tiny configs (issue 11): FSDP2, FSDP2 + pipeline parallelism, a user's rank-0-only
collective caught at the user's line.

torchtitan 0.3.0 is written for a newer torch than 2.13: `torchtitan_shim.py` adds the two
calls it makes that torch 2.13 lacks, and its `spmd_types` backend needs a newer
`fully_shard`, so these runs take `--parallelism.spmd_backend partial_dtensor`. Its wheel
ships no test assets: a tiny tokenizer and a c4_test-shaped dataset are built here.
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import uuid
from pathlib import Path

import pytest
from cli_server import run_commlint

# torchtitan runs in `commlint run`'s children only: importing it here (12 s under load) would
# cost every xdist worker that time at collection.
if importlib.util.find_spec("torchtitan") is None:
    pytest.skip("torchtitan is not installed", allow_module_level=True)

FIXTURES = Path(__file__).parent / "fixtures"
SHIM = FIXTURES / "torchtitan_shim.py"
TINY = [
    "--module", "llama3", "--config", "llama3_debugmodel",
    "--training.seq_len", "64", "--training.local_batch_size", "2", "--training.steps", "2",
    "--training.disable_cuda_graphs", "--parallelism.spmd_backend", "partial_dtensor",
]  # fmt: skip


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    """A working folder with `tests/assets/tokenizer` and `tests/assets/c4_test`, where
    torchtitan's debug config looks for them."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("torchtitan")
    rng = random.Random(0)
    words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "was",
        "for",
        "on",
        "that",
        "with",
        "as",
        "by",
        "at",
        "from",
        "it",
        "an",
    ]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(40, 120))) for _ in range(64)]
    data = root / "tests" / "assets" / "c4_test"
    data.mkdir(parents=True)
    (data / "data.json").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<unk>", "<|begin_of_text|>", "<|end_of_text|>"]
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=special,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    folder = root / "tests" / "assets" / "tokenizer"
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"bos_token": special[1], "eos_token": special[2], "add_bos_token": True}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return root


def titan(script: Path, world: int, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`commlint run` of the entry point at `world` ranks, its trace saved in a fresh folder
    of `cwd` (`saved_trace`)."""
    cmd = [
        "run", "--nproc-per-node", str(world),
        "--timeout", "240", "--save-trace", str(cwd / f"trace-{uuid.uuid4().hex[:8]}"),
        str(script), *TINY, *args,
    ]  # fmt: skip
    return run_commlint(cmd, timeout=900, cwd=cwd)


def assert_clean(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "All checks passed" in proc.stdout
    assert "recorded again with small real CPU tensors" not in out  # no real compute
    trace = Path(proc.args[proc.args.index("--save-trace") + 1])
    saved = (trace / "rank-00000.yaml").read_text()
    assert '"tensors": "fake"' in saved
    return saved


FSDP2 = ("--parallelism.data_parallel_shard_degree", "2")


@pytest.mark.parametrize(
    ("world", "config", "recorded"),
    [
        # FSDP2's parameter all-gathers and gradient reduce-scatters
        (2, FSDP2, ['"op": "all_gather"', '"op": "reduce_scatter"']),
        # the TP pairs' collectives (attention and MLP outputs) on their own groups
        (4, ("--parallelism.tensor_parallel_degree", "2", *FSDP2), ['"g0_1"', '"g0_2"']),
        # PP=2, the debug config's Interleaved1F1B (two stages per rank): the schedule's
        # first step votes over the stages with sends and receives whose values decide how
        # stages learn their shapes, delivered within one pass
        (4, ("--parallelism.pipeline_parallel_degree", "2", *FSDP2), ['"send"', '"recv"']),
    ],
    ids=["fsdp2", "fsdp2+tp", "pp+fsdp2"],
)
def test_torchtitan_is_clean_on_fake_tensors(
    assets: Path, world: int, config: tuple[str, ...], recorded: list[str]
):
    saved = assert_clean(titan(SHIM, world, *config, cwd=assets))
    assert all(text in saved for text in recorded), recorded


def test_torchtitan_users_rank0_only_collective_is_caught_at_the_users_line(assets: Path):
    script = FIXTURES / "torchtitan_user_hook.py"
    proc = titan(script, 2, *FSDP2, cwd=assets)
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    line = next(
        i for i, text in enumerate(script.read_text().splitlines(), 1) if "# rank 0 only" in text
    )
    assert f"{script.name}:{line}: CL20" in proc.stdout, proc.stdout
    assert "recorded again with small real CPU tensors" not in proc.stderr


def test_the_unchanged_entry_point_names_the_torch_api_it_lacks(assets: Path):
    # `-m torchtitan.train`, no shim: torchtitan 0.3.0 calls `torch.distributed.set_timeout`
    # after its first step, which torch 2.13 does not have. One located line at torchtitan's
    # own use of it, with the exception's own text; no traceback, no real compute.
    import torch
    import torchtitan.distributed.utils as titan_utils

    source = Path(titan_utils.__file__)
    line = next(
        i
        for i, text in enumerate(source.read_text().splitlines(), 1)
        if "torch.distributed.set_timeout(" in text
    )
    cmd = [
        "run", "--nproc-per-node", "2", "--timeout", "240",
        "-m", "torchtitan.train", *TINY, *FSDP2,
    ]  # fmt: skip
    proc = run_commlint(cmd, timeout=900, cwd=assets)
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("commlint: error")]
    assert errors == [
        f"commlint: error: {source}:{line}: every rank raised AttributeError: module "
        "'torch.distributed' has no attribute 'set_timeout' — the installed torch "
        f"{torch.__version__} has no `torch.distributed.set_timeout`, which this line uses: "
        "the program is written for a torch that has it"
    ], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "recorded again with small real CPU tensors" not in proc.stderr
