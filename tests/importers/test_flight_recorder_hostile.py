"""Hostile and malformed Flight Recorder dumps: one located line and exit 2 each, the other
inputs still checked; bounded work on shared-reference pickles; no pickle runs code."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from fr_synth import Rank, write

from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans.importers import load_flight_recorder

W2 = {"0": ("default_pg", [0, 1])}


def good_entry(**change) -> dict:
    e = {
        "record_id": 0,
        "profiling_name": "nccl:all_reduce",
        "process_group": ["0", "default_pg"],
        "collective_seq_id": 1,
        "p2p_seq_id": 0,
        "state": "started",
        "input_sizes": [[8]],
        "output_sizes": [[8]],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "frames": [{"name": "step", "filename": "/job/train.py", "line": 3}],
    }
    e.update(change)
    return {k: v for k, v in e.items() if v is not ...}


def dump(entries, **top) -> dict:
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "entries": entries,
        **top,
    }


# (file content, expected message after "<file>: ")
MALFORMED_JSON = {
    "integers": (dump([good_entry(), 7]), "entry 1: is an integer, not a dict"),
    "missing_key": (
        dump([good_entry(), good_entry(record_id=1, process_group=...)]),
        "entry 1: missing 'process_group'",
    ),
    "pg_wrong_type": (
        dump([good_entry(process_group=3)]),
        "entry 0: 'process_group' is an integer, not a (name, description) pair",
    ),
    "sizes_string": (
        dump([good_entry(input_sizes="[[8]]")]),
        "entry 0: 'input_sizes' is a string, not a list of shapes",
    ),
    "seq_list": (
        dump([good_entry(collective_seq_id=[1])]),
        "entry 0: 'collective_seq_id' is a list, not an integer",
    ),
    "frames_string": (
        dump([good_entry(frames="train.py:3")]),
        "entry 0: 'frames' is a string, not a list",
    ),
    "frame_line": (
        dump([good_entry(frames=[{"filename": "/job/train.py", "line": "3"}])]),
        "entry 0: a frame's 'line' is a string, not an integer",
    ),
    "entries_dict": (dump({"0": good_entry()}), "'entries' is a dict, not a list of entries"),
    "pg_config_list": (
        dump([good_entry()], pg_config=["0"]),
        "pg_config: is a list, not a dict",
    ),
    "pg_ranks_garbage": (
        dump([good_entry()], pg_config={"0": {"desc": "default_pg", "ranks": "[0, one]"}}),
        "pg_config: group '0': 'ranks' is not a list of ranks",
    ),
    "state_number": (dump([good_entry(state=2)]), "entry 0: 'state' is an integer, not a string"),
    "top_level_list": (
        [good_entry()],
        "not a Flight Recorder dump: the top level is a list, not a dict",
    ),
}


def test_every_malformed_json_dump_is_located_and_the_others_are_still_checked(tmp_path, capsys):
    good = write(
        tmp_path / "good",
        [Rank(0).p2p("send", 0, 1, line=70), Rank(1).p2p("send", 1, 0, line=74)],
        W2,
        as_json=True,
    )
    paths = []
    for name, (content, _) in MALFORMED_JSON.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "rank_0.json").write_text(json.dumps(content))
        paths.append(str(folder / "rank_0.json"))
    assert main(["plan", *paths, str(good), "--input-format", "fr", "--format", "json"]) == 2
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    for name, (_, message) in MALFORMED_JSON.items():
        assert f"commlint: error: {tmp_path / name / 'rank_0.json'}: {message}" in err, name
    assert len(err) == len(MALFORMED_JSON)
    assert "Traceback" not in captured.err and "internal error" not in captured.err
    out = json.loads(captured.out)
    assert [f["code"] for f in out["findings"]] == ["CL201"]  # the good folder, still checked


def test_deep_and_huge_json_are_located(tmp_path):
    deep = tmp_path / "rank_0.json"
    deep.write_text('{"entries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(CommlintInputError, match=r"rank_0\.json: invalid Flight Recorder JSON"):
        load_flight_recorder(deep)
    digits = tmp_path / "rank_1.json"
    digits.write_text('{"entries": [], "version": ' + "9" * 5000 + "}")
    with pytest.raises(CommlintInputError, match=r"rank_1\.json: invalid Flight Recorder JSON"):
        load_flight_recorder(digits)


def _laughs(depth: int = 40) -> list:
    """A list whose tree has 2**depth leaves, in a few hundred pickle bytes."""
    x: list = ["ha"]
    for _ in range(depth):
        x = [x, x]
    return x


BOMB_SCRIPT = """
import sys
from commlint.cli import main
sys.exit(main(["plan", "--input-format", "fr", *sys.argv[1:]]))
"""


def test_shared_reference_pickles_cost_bounded_work(tmp_path):
    """The 1.2 KB billion-laughs pickle used to spin in str() forever; every field the reader
    walks is typed, and the walk has a budget for shared lists that are well typed."""
    bombs = {
        "name": dump([good_entry(profiling_name=_laughs())]),
        "version": dump([good_entry()], version=_laughs()),
        "frames": dump([good_entry(frames=[{"filename": _laughs(), "line": 1}])]),
        "ranks": dump([good_entry()], pg_config={"0": {"desc": "x", "ranks": _laughs()}}),
    }
    shape = [1] * 400
    sizes = [shape] * 400
    bombs["budget"] = dump([good_entry(input_sizes=sizes)] * 400)
    paths = []
    for name, content in bombs.items():
        f = tmp_path / f"{name}_0"
        raw = pickle.dumps(content, protocol=4)
        assert len(raw) < 6000, (name, len(raw))
        f.write_bytes(raw)
        paths.append(str(f))
    done = subprocess.run(
        [sys.executable, "-c", BOMB_SCRIPT, *paths],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.splitlines()
    assert len(err) == 5, err  # a version that is not one is an error, never a pass (issue 32)
    assert f"{paths[1]}: 'version' is a list, not a version string" in done.stderr
    assert f"{paths[0]}: entry 0: 'profiling_name' is a list, not a string" in err[0]
    assert "a frame's 'filename' is a list, not a string" in done.stderr
    assert "pg_config: group '0': 'ranks' holds something other than integers" in done.stderr
    assert (
        f"{paths[4]}: entry 0: holds far more data than its size allows (shared references "
        "in a pickle?); refusing to walk it"
    ) in done.stderr


def test_a_reduce_payload_is_refused_and_never_runs(tmp_path):
    """torch's fr_trace reads dumps with pickle.load, which runs a crafted `__reduce__`;
    commlint's unpickler loads no class at all."""
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (tmp_path / "dumps").mkdir()
    evil = tmp_path / "dumps" / "rank_0"
    evil.write_bytes(pickle.dumps({"version": "2.10", "entries": [], "x": Payload()}))
    with pytest.raises(CommlintInputError) as exc:
        load_flight_recorder(evil)
    assert exc.value.error.path == str(evil)
    assert "refusing to load posix.system from a dump" in exc.value.error.message
    assert main(["plan", str(tmp_path / "dumps")]) == 2
    assert not marker.exists()
    # the same bytes through pickle.load do run it: the danger is real
    pickle.loads(evil.read_bytes())
    assert marker.exists()


def test_a_malformed_size_on_a_later_rank_is_located_there(tmp_path):
    """Sizes are checked where used; an entry unlike its collective's first one is checked."""
    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "rank_0.json").write_text(json.dumps(dump([good_entry()])))
    bad = dump([good_entry(output_sizes=[["8"]])])
    (folder / "rank_1.json").write_text(json.dumps(bad))
    with pytest.raises(CommlintInputError) as exc:
        load_flight_recorder(folder)
    assert exc.value.error.path == str(folder / "rank_1.json")
    assert exc.value.error.message == (
        "entry 0: 'output_sizes' holds a dimension that is not a non-negative integer"
    )
