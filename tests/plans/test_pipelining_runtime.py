"""A compute action before its RECV: torch's runtime refuses the schedule, and so do we.

torch's `_PipelineScheduleRuntime._step_microbatches` asserts "Computing action=… before
receiving input" when an F (or I/B) of a stage whose neighbour lives on another rank runs
before its RECV_F (RECV_B) was posted on that rank. The CSVs here are torch's own
`_dump_csv` output, with one RECV moved after the compute that consumes it."""

from __future__ import annotations

import logging

import pytest

from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans.importers.pipelining_csv import load_pipelining_csv

tp = pytest.importorskip("torch_pipelining")
ts = tp.ts

PP, MICROBATCHES = 2, 4


def _rows(tmp_path) -> list[list[str]]:
    stages = [tp._MockStage(0, 2 * PP, PP, 0), tp._MockStage(PP, 2 * PP, PP, 0)]
    sched = ts.ScheduleInterleaved1F1B(stages, n_microbatches=MICROBATCHES)
    good = tmp_path / "good.csv"
    sched._dump_csv(str(good), "compute_comms")
    return [line.split(",") for line in good.read_text().splitlines()]


def _swap(rows: list[list[str]], rank: int, recv: str, compute: str) -> tuple[int, int]:
    row = rows[rank]
    i, j = row.index(recv), row.index(compute)
    assert i < j  # torch's own schedule receives first
    row[i], row[j] = row[j], row[i]
    return i, j


def _write(tmp_path, rows: list[list[str]], name: str):
    path = tmp_path / name
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    return path


def _torch_runtime_error(path, rank: int) -> str | None:
    """Run torch's runtime on `rank`'s row up to its first failure, without processes: the
    assertion fires before any communication when the offending action comes first."""
    stages = [tp._MockStage(rank, 2 * PP, PP, rank), tp._MockStage(rank + PP, 2 * PP, PP, rank)]
    sched = ts.ScheduleInterleaved1F1B(stages, n_microbatches=MICROBATCHES)
    sched._load_csv(str(path), "compute_comms")
    sched._check_inputs = lambda args, kwargs, targets, losses: (args, kwargs)
    sched._initialize_stages = lambda *a, **k: None
    logging.getLogger("torch.distributed.pipelining.schedules").disabled = True
    try:
        sched._step_microbatches([()] * MICROBATCHES, [{}] * MICROBATCHES)
    except AssertionError as exc:
        return str(exc)
    finally:
        logging.getLogger("torch.distributed.pipelining.schedules").disabled = False
    return None


def test_torch_own_schedule_is_accepted(tmp_path):
    path = _write(tmp_path, _rows(tmp_path), "good.csv")
    trace = load_pipelining_csv(path)
    assert trace.meta["pipelining"]["format"] == "compute_comms"


def test_forward_before_its_recv_is_refused_like_torch_runtime(tmp_path, capsys):
    rows = _rows(tmp_path)
    col, _ = _swap(rows, 1, "1RECV_F0", "1F0")  # 1F0 now sits where 1RECV_F0 was
    bad = _write(tmp_path, rows, "bad.csv")
    assert _torch_runtime_error(bad, 1) == "Computing action=1F0 before receiving input"
    with pytest.raises(CommlintInputError) as exc:
        load_pipelining_csv(bad)
    err = exc.value.error
    assert (err.path, err.line) == (str(bad), 2)
    assert f"rank 1 (row 2), column {col + 1}: 1F0 computes before its input arrives" in str(
        exc.value
    )
    assert "Put 1RECV_F0 before 1F0" in str(exc.value)
    # the command: one located line, exit 2, and another input of the same run still checked
    good = _write(tmp_path, _rows(tmp_path), "good.csv")
    assert main(["plan", str(bad), str(good)]) == 2
    out, errs = capsys.readouterr()
    assert [line for line in errs.splitlines() if line.strip()] == [
        line for line in errs.splitlines() if f"{bad}:2:" in line
    ]
    assert "Traceback" not in errs and "1 checked" in out


def test_backward_before_its_recv_is_refused(tmp_path):
    rows = _rows(tmp_path)
    # rank 0 holds stage 2, whose backward input comes from stage 3 on rank 1
    col, _ = _swap(rows, 0, "2RECV_B0", "2B0")
    bad = _write(tmp_path, rows, "bad_b.csv")
    with pytest.raises(CommlintInputError, match=rf"column {col + 1}: 2B0 computes before"):
        load_pipelining_csv(bad)


def test_stage_whose_neighbour_is_local_needs_no_recv():
    """torch's "V-schedule special case": stages 1 and 2 on one rank pass data locally."""
    trace = load_pipelining_csv.__globals__["loads_pipelining_csv"](
        "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,2F0,3F0,3B0,2B0,1B0,1SEND_B0\n",
        fmt="compute_comms",
    )
    assert [a.op for a in trace.ranks[1]][:2] == ["irecv", "wait"]
