"""One input gate for every reader (issue 32): regular files only, sizes and declared counts
checked before anything is sized by them, Python sources parsed where a native crash costs
one input, and every refusal a located error while the other inputs are still checked.

Cases that crashed or hung the process run the CLI in a subprocess with a timeout, which
reports its own peak memory as it exits."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import nnscaler_gen as gen
import pytest

from commlint.findings import CommlintInputError
from commlint.isolate import IsolatedFailure, call_isolated
from commlint.plans.importers import load_nnscaler, load_sketchdlc
from commlint.plans.importers import nnscaler as nnscaler_reader
from commlint.plans.importers.pipelining_csv import loads_pipelining_csv

# rank 1 never joins the barrier: one finding (CL202), so "still checked" is visible
HANG = "version: 1\nworld_size: 2\nranks:\n  0: [{op: barrier}]\n  1: []\n"


# the child's own high-water mark: VmHWM starts afresh at exec (ru_maxrss would carry the
# pytest process's size over from the fork)
_PEAK = (
    "import atexit, sys\n"
    "def peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            print('peak', line.split()[1], file=sys.stderr)\n"
    "atexit.register(peak)\n"
    "from commlint.cli import main\n"
    "sys.exit(main(['plan', *sys.argv[1:]]))\n"
)


def _cli(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, int]:
    """`commlint plan ARGS`' result and its peak resident memory in MB."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *args], capture_output=True, text=True, timeout=timeout
    )
    peak = [line for line in proc.stderr.splitlines() if line.startswith("peak ")]
    return proc, int(peak[-1].split()[1]) // 1024 if peak else 0


def _good(tmp_path: Path) -> Path:
    plan = tmp_path / "good.yaml"
    plan.write_text(HANG)
    return plan


def test_a_fifo_named_like_gencode_is_refused_not_read(tmp_path: Path) -> None:
    folder = gen.tp_dp(tmp_path / "nn")
    (folder / "gencode1.py").unlink()
    os.mkfifo(folder / "gencode1.py")
    proc, _ = _cli(str(folder), str(_good(tmp_path)), timeout=60)
    assert proc.returncode == 2
    assert f"{folder / 'gencode1.py'}: not a regular file (a FIFO): not read" in proc.stderr
    assert "CL202" in proc.stdout


def test_gencode_nested_3000_deep_is_a_located_error_not_a_crash(tmp_path: Path) -> None:
    folder = tmp_path / "nn"
    folder.mkdir()
    (folder / "gencode0.py").write_text("x = " + "(" * 3000 + ")" * 3000 + "\n")
    proc, _ = _cli(str(folder), str(_good(tmp_path)))
    assert proc.returncode == 2, proc.stderr
    assert f"{folder / 'gencode0.py'}:1: invalid Python: too many nested parentheses" in proc.stderr
    assert "CL202" in proc.stdout


@pytest.mark.parametrize(
    "text",
    ["x = " + "-" * 50_000 + "1\n", "x = a" + ".b" * 100_000 + "\n"],
    ids=["unary", "attributes"],
)
def test_gencode_past_pythons_own_parser_is_refused(tmp_path: Path, text: str) -> None:
    folder = tmp_path / "nn"
    folder.mkdir()
    (folder / "gencode0.py").write_text(text)
    proc, _ = _cli(str(folder), str(_good(tmp_path)))
    assert proc.returncode == 2, proc.stderr
    assert "gencode0.py: too deeply nested to read" in proc.stderr
    assert "CL202" in proc.stdout


def test_deep_gencode_is_parsed_in_a_child_with_the_same_result(tmp_path, monkeypatch) -> None:
    folder = gen.tp_dp(tmp_path / "nn")
    here = load_nnscaler(folder)
    calls = []
    real = nnscaler_reader.call_isolated
    monkeypatch.setattr(nnscaler_reader, "RISKY_DEPTH", 0)
    monkeypatch.setattr(
        nnscaler_reader, "call_isolated", lambda *a, **k: calls.append(a) or real(*a, **k)
    )
    isolated = load_nnscaler(folder)
    assert len(calls) == len(list(folder.glob("gencode*.py")))
    assert isolated.ranks == here.ranks and isolated.groups == here.groups
    (folder / "gencode0.py").write_text("x = (\n")  # the child's located error comes back
    with pytest.raises(CommlintInputError, match="invalid Python"):
        load_nnscaler(folder)


def test_a_native_crash_in_the_child_is_named() -> None:
    with pytest.raises(IsolatedFailure, match=r"crashed \(signal 11, SIGSEGV\)"):
        call_isolated("faulthandler", "_sigsegv", False)


def test_sketchdlc_header_asking_for_a_trillion_nodes_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "sk"
    folder.mkdir()
    (folder / "worker_0.txt").write_text(
        "== num_workers:= 999999999999 num_servers:= 1,\n"
        "0\t0\t1\t25\t0\tOP:= Push_Send_Worker\t0-0-s0\n"
    )
    proc, peak = _cli(str(folder), str(_good(tmp_path)))
    assert proc.returncode == 2
    assert "worker_0.txt:1: header: num_workers 999999999999 is more nodes than" in proc.stderr
    assert "CL202" in proc.stdout and 0 < peak < 400


@pytest.mark.parametrize(
    "text, message",
    [
        ("== num_workers:= " + "9" * 5000 + " num_servers:= 1,\n", ":1: header: a node count"),
        ("0\t0\t" + "1" * 5000 + "\t25\t0\tOP:= Push_Send_Worker\t0-0-s0\n", ":1: id, src, dst"),
        ("0\t0\t99999\t25\t0\tOP:= Push_Send_Worker\t0-0-s0\n", ":1: record 0: dst 99999 is"),
        ("0\t0\t1\t25\t0\tOP:= Push_Send_Worker\t" + "7" * 5000 + "-0-s0\n", None),
    ],
    ids=["header", "record", "node", "key"],
)
def test_sketchdlc_numbers_are_bounded_by_the_file(tmp_path, text, message) -> None:
    folder = tmp_path / "sk"
    folder.mkdir()
    (folder / "worker_0.txt").write_text(text + "1\t1\t0\t25\t0\tOP:= Pull_Recv_Worker\t0-1-s0\n")
    if message is None:  # a key too long to be one is not a key: no internal error
        load_sketchdlc(folder)
        return
    with pytest.raises(CommlintInputError) as info:
        load_sketchdlc(folder)
    assert message in str(info.value)


def test_a_tiny_pickle_asking_for_gigabytes_by_memo_index(tmp_path: Path) -> None:
    dump = tmp_path / "nccl_trace_rank_0"
    # (what follows the STOP opcode is never read: it makes the file look like a dump)
    dump.write_bytes(b"\x80\x02}r" + struct.pack("<I", 1 << 28) + b".entries")
    proc, peak = _cli(str(dump), str(_good(tmp_path)), timeout=120)
    assert proc.returncode == 2
    assert f"{dump}: not a Flight Recorder dump: unpickling it asks for more than" in proc.stderr
    assert "CL202" in proc.stdout
    assert 0 < peak < 600  # the unpickler alone took 4.1 GB


def test_a_million_duplicate_json_keys_cost_little(tmp_path: Path) -> None:
    plan = tmp_path / "dup.json"
    plan.write_text('{"version": 1, ' + ", ".join(['"a": 1'] * 1_000_000) + "}")
    proc, peak = _cli(str(plan), str(_good(tmp_path)), timeout=120)
    assert proc.returncode == 2
    assert f"{plan}: duplicate key 'a'" in proc.stderr and "CL202" in proc.stdout
    assert 0 < peak < 500  # the error path took 843 MB (and 13 s) locating the line


def test_a_csv_cell_past_the_field_limit_is_located() -> None:
    text = "0F0,1F0\n0B0," + "x" * 200_000 + "\n"
    with pytest.raises(CommlintInputError, match=r"row 2: not readable as CSV \(field larger"):
        loads_pipelining_csv(text, path="s.csv")


def test_inputs_larger_than_the_limit_are_not_read(tmp_path: Path, monkeypatch) -> None:
    import commlint.plans.gate as gate

    plan = _good(tmp_path)
    monkeypatch.setattr(gate, "MAX_INPUT_BYTES", 16)
    from commlint.plans.io import load_trace

    with pytest.raises(CommlintInputError, match="larger than the 16-byte limit"):
        load_trace(plan)


def test_a_fifo_given_as_the_groups_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "groups.json"
    os.mkfifo(fifo)
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_text('{"version": "2.10", "pg_config": {}, "entries": []}')
    proc, _ = _cli(str(dump), "--groups", str(fifo), timeout=60)
    assert proc.returncode == 2
    assert f"{fifo}: --groups: not a regular file (a FIFO): not read" in proc.stderr


@pytest.mark.parametrize(
    "field",
    [
        {"collective_seq_id": 10**5000},
        {"input_sizes": [[10**5000]]},
        {"frames": [{"name": "s", "filename": "/job/train.py", "line": 10**5000}]},
    ],
    ids=["seq", "size", "line"],
)
def test_a_pickled_integer_of_5000_digits_is_located(tmp_path: Path, field: dict) -> None:
    import pickle

    from test_flight_recorder_hostile import dump, good_entry

    from commlint.plans.importers import load_flight_recorder

    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank, entry in ((0, good_entry(**field)), (1, good_entry())):
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump([entry])))
    with pytest.raises(CommlintInputError, match="holds an integer of more than 4300 digits"):
        load_flight_recorder(folder)


@pytest.mark.parametrize(
    "ranks, message",
    [("[0, 0x" + "f" * 5000 + "]", "without literal ranks"), ("[0x0, 0b1]", None)],
    ids=["huge-hex", "hex-and-binary"],
)
def test_gencode_integer_literals_in_any_base(tmp_path: Path, ranks: str, message) -> None:
    folder = gen.tp_dp(tmp_path / "nn")
    for f in folder.glob("gencode*.py"):
        f.write_text(f.read_text().replace("ranks=[0, 1]", f"ranks={ranks}"))
    if message is None:  # the same plan, written in other bases

        def shape(trace):
            return {r: [(a.op, a.group, a.peer) for a in acts] for r, acts in trace.ranks.items()}

        assert shape(load_nnscaler(folder)) == shape(load_nnscaler(gen.tp_dp(tmp_path / "ref")))
        return
    with pytest.raises(CommlintInputError, match=message):
        load_nnscaler(folder)
