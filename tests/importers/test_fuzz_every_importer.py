"""Every importer under mutated input (issue 32): a valid sample of each format, cut short,
with bytes flipped, with hostile pieces spliced in (huge integers, deep nesting, NUL, bidi
overrides, a pickle memo index, aliases, SketchDLC counts). Each read either gives a trace or
raises a located `CommlintInputError`: no other exception, no hang (an alarm per read), no
unbounded memory (each read runs under an address-space budget), no payload run (the
pickles hold no classes). Fixed seed (derandomized), bounded examples: about 20 s in all."""

from __future__ import annotations

import json
import pickle
import signal
from pathlib import Path

import nnscaler_gen as gen
import pytest
import sketchdlc_gen
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_flight_recorder_hostile import dump, good_entry

from commlint.findings import CommlintInputError
from commlint.plans.gate import memory_budget
from commlint.plans.importers import load_any

HANG = "version: 1\nworld_size: 2\nranks:\n  0: [{op: barrier}]\n  1: []\n"
GENERATED = "version: 1\ngenerate: {degrees: {pp: 2, dp: 2}, schedule: 1f1b, microbatches: 4}\n"
ZBH1 = "0F0,0F1,0I0,0F2,0I1,0W0,0I2,0W1,0W2\n1F0,1I0,1W0,1F1,1I1,1W1,1F2,1I2,1W2\n"
NASTY = [
    b"9" * 5000,
    b"(" * 3000,
    b"[" * 2000,
    b"{" * 1500,
    b"\x00",
    "\u202e".encode(),
    b"\xff\xfe",
    b"r\xff\xff\xff\x3f",  # LONG_BINPUT, a 1 G memo index
    b"\x8a\xff\xff\xff\x7f",  # LONG4 of 2 GB
    b"&a [*a, *a, *a, *a]",
    b"num_workers:= 999999999999 num_servers:= 9",
    b"OP:= Push_Send_Worker",
    b'"version": [[[[[[]]]]]]',
    b"ranks:",
    b"generate:",
    b"\n" * 3,
    b"-" * 5000,
]
BUDGET = 768 << 20  # more than any of these small inputs may take
ALARM = 20  # seconds for one read (one read of these inputs takes milliseconds)


def _samples(root: Path) -> dict[str, tuple[str, str, bytes]]:
    """format → (input format, file name, valid content)."""
    nn = gen.tp_dp(root / "nn")
    sk = sketchdlc_gen.write_job(root / "sk")
    return {
        "trace-yaml": ("trace", "plan.yaml", HANG.encode()),
        "trace-json": ("trace", "plan.json", json.dumps(_yaml_to_data(HANG)).encode()),
        "generate": ("trace", "gen.yaml", GENERATED.encode()),
        "pipelining-csv": ("pipelining-csv", "s.csv", ZBH1.encode()),
        "sketchdlc": ("sketchdlc", "worker_0.txt", (sk / "worker_0.txt").read_bytes()),
        "nnscaler": ("nnscaler", "gencode0.py", (nn / "gencode0.py").read_bytes()),
        "fr-pickle": ("fr", "nccl_trace_rank_0", pickle.dumps(dump([good_entry()]), protocol=2)),
        "fr-json": ("fr", "rank_0.json", json.dumps(dump([good_entry()])).encode()),
    }


def _yaml_to_data(text: str) -> dict:
    import yaml

    return yaml.safe_load(text)


@st.composite
def mutations(draw: st.DrawFn, content: bytes) -> bytes:
    data = bytearray(content)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["cut", "flip", "splice", "drop", "bytes"]))
        if kind == "cut":
            del data[at:]
        elif kind == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "splice":
            data[at:at] = draw(st.sampled_from(NASTY))
        elif kind == "drop":
            del data[at : at + draw(st.integers(1, 64))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def _read(tmp: Path, fmt: str, name: str, content: bytes) -> None:
    path = tmp / name
    path.write_bytes(content)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM)
    try:
        with memory_budget(BUDGET):
            load_any(path, fmt)
    except CommlintInputError as exc:
        assert exc.error.path, exc  # located: at least the file
    except _Hang:
        pytest.fail(f"{name}: no answer within {ALARM} s for {content[:200]!r}")
    except MemoryError:
        pytest.fail(f"{name}: more than {BUDGET >> 20} MB for {content[:200]!r}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


FORMATS = [
    "trace-yaml",
    "trace-json",
    "generate",
    "pipelining-csv",
    "sketchdlc",
    "nnscaler",
    "fr-pickle",
    "fr-json",
]


@pytest.mark.parametrize("name", FORMATS)
def test_every_importer_gives_a_trace_or_a_located_error(tmp_path_factory, name: str) -> None:
    root = tmp_path_factory.mktemp(f"fuzz-{name}")
    fmt, file_name, content = _samples(root)[name]
    work = root / "work"
    work.mkdir()
    _read(work, fmt, file_name, content)  # the sample itself reads

    @settings(
        max_examples=100,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(mutated=mutations(content))
    def check(mutated: bytes) -> None:
        _read(work, fmt, file_name, mutated)

    check()
