"""torch.distributed.pipelining CSV schedules: the lowering must equal torch 2.13's own."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from commlint import check
from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans.importers import detect_format, load_pipelining_csv
from commlint.plans.importers.pipelining_csv import (
    loads_pipelining_csv,
    lower_compute_only,
    parse_action,
    read_csv,
)
from commlint.plans.io import semantic_errors

schedules = pytest.importorskip("torch.distributed.pipelining.schedules")


class MockStage:
    """What a schedule's constructor reads from its stages (no process group needed)."""

    def __init__(self, index: int, num_stages: int, group_size: int) -> None:
        self.stage_index = index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = 0
        self.is_first = index == 0
        self.is_last = index == num_stages - 1
        self.stage_index_to_group_rank: dict[int, int] = {}
        self.submod = None


def strip_sites(trace) -> dict:
    return {r: [a.model_dump(exclude={"site"}) for a in acts] for r, acts in trace.ranks.items()}


MULTI = [
    ("ScheduleInterleaved1F1B", False),
    ("ScheduleLoopedBFS", False),
    ("ScheduleInterleavedZeroBubble", False),
    ("ScheduleZBVZeroBubble", True),
    ("ScheduleDualPipeV", True),
]


def torch_schedule(name: str, v_shape: bool, pp: int, microbatches: int):
    cls = getattr(schedules, name)
    last = 2 * pp - 1 if v_shape else pp
    stages = [MockStage(0, 2 * pp, pp), MockStage(last, 2 * pp, pp)]
    return cls(stages, n_microbatches=microbatches)


@pytest.mark.parametrize(("name", "v_shape"), MULTI)
@pytest.mark.parametrize(("pp", "microbatches"), [(2, 4), (4, 8), (4, 12)])
def test_lowering_equals_torch(tmp_path, name, v_shape, pp, microbatches):
    sched = torch_schedule(name, v_shape, pp, microbatches)
    compute = tmp_path / "compute.csv"
    comms = tmp_path / "comms.csv"
    sched._dump_csv(str(compute), "compute_only")
    sched._dump_csv(str(comms), "compute_comms")
    ours = lower_compute_only(read_csv(compute.read_text()))
    theirs = {r: [str(a) for a in acts] for r, acts in sched.pipeline_order_with_comms.items()}
    assert {r: [str(a) for a in acts] for r, acts in ours.items()} == theirs
    a, b = load_pipelining_csv(compute), load_pipelining_csv(comms)
    # lowering the compute-only CSV = reading torch's own comms CSV (sites name the file)
    assert strip_sites(a) == strip_sites(b)
    assert a.meta["pipelining"]["format"] == "compute_only"
    assert b.meta["pipelining"]["format"] == "compute_comms"
    # built without re-validation: the traces must pass the plan files' structural checks
    assert list(semantic_errors(a)) == [] and list(semantic_errors(b)) == []
    assert [f.code for f in check(a, "all").findings] == []


def _single_stage_csv(tmp_path, name: str):
    sched = getattr(schedules, name)(MockStage(0, 4, 4), n_microbatches=6)
    rows = [",".join("" if a is None else str(a) for a in sched.pipeline_order[r]) for r in
            range(4)]  # fmt: skip
    path = tmp_path / f"{name}.csv"
    path.write_text("\n".join(rows) + "\n")
    order = {r: [a for a in acts if a is not None] for r, acts in sched.pipeline_order.items()}
    try:
        schedules._add_send_recv(order, stage_to_rank=lambda s: s, num_stages=4)
        torch_ok = True
    except AssertionError:
        torch_ok = False
    return path, torch_ok


def test_single_stage_gpipe_lowers_like_torch(tmp_path):
    path, torch_ok = _single_stage_csv(tmp_path, "ScheduleGPipe")
    assert torch_ok
    trace = load_pipelining_csv(path)
    sends = [a for acts in trace.ranks.values() for a in acts if a.op == "isend"]
    assert len(sends) == 2 * 6 * 3  # F and B cross 3 stage boundaries per microbatch
    assert [f.code for f in check(trace, "all").findings] == []


def test_single_stage_1f1b_order_of_torch_2_13_is_rejected_by_both(tmp_path):
    """torch 2.13's informational `Schedule1F1B.pipeline_order` numbers the last rank's
    microbatches from 1 (`3F1 … 3F6`): torch's own `_add_send_recv` raises on it, and so do we."""
    path, torch_ok = _single_stage_csv(tmp_path, "Schedule1F1B")
    assert not torch_ok
    with pytest.raises(CommlintInputError, match=r"cannot be lowered.*rank 3 at 3F6"):
        load_pipelining_csv(path)


def test_lowered_actions_wait_before_their_compute():
    trace = loads_pipelining_csv("0F0,0B0\n1F0,1B0\n")
    r1 = [(a.op, a.label) for a in trace.ranks[1]]
    assert r1 == [
        ("irecv", "1RECV_F0"),
        ("wait", "before 1F0"),
        ("isend", "1SEND_B0"),
        ("wait", "end of step"),
    ]
    r0 = [(a.op, a.label) for a in trace.ranks[0]]
    assert r0 == [
        ("isend", "0SEND_F0"),
        ("irecv", "0RECV_B0"),
        ("wait", "before 0B0"),
        ("wait", "end of step"),
    ]


def test_compute_comms_wait_cycle_is_a_deadlock(tmp_path):
    path = tmp_path / "cycle.csv"
    path.write_text("0RECV_B0,0B0,0F0,0SEND_F0\n1RECV_F0,1F0,1B0,1SEND_B0\n")
    f = [f for f in check(load_pipelining_csv(path), "all").findings if f.code == "CL201"]
    assert len(f) == 1
    assert {(e.rank, e.op) for e in f[0].cycle} == {(0, "wait(0RECV_B0)"), (1, "wait(1RECV_F0)")}
    assert {e.site for e in f[0].cycle} == {f"{path}:1", f"{path}:2"}


def test_compute_comms_missing_send_is_a_hang():
    trace = loads_pipelining_csv("0F0\n1RECV_F0,1F0\n", fmt="compute_comms")
    codes = [f.code for f in check(trace, "gloo").findings]
    assert codes == ["CL202"]


def test_malformed_compute_only_schedule_is_an_input_error():
    with pytest.raises(CommlintInputError, match=r"cannot be lowered.*rank 0 at 0B0"):
        loads_pipelining_csv("0B0,0F0\n1F0,1B0\n", path="bad.csv")


def test_parse_errors_name_row_and_column():
    assert parse_action("2RECV_F13") is not None and str(parse_action("2RECV_F13")) == "2RECV_F13"
    assert parse_action(" ") is None
    overlap = parse_action("(0F1;1B0)OVERLAP_F_B")
    assert [str(p) for p in overlap.parts] == ["0F1", "1B0"]
    with pytest.raises(CommlintInputError) as exc:
        loads_pipelining_csv("0F0,0B0\n1F0,1X0\n", path="s.csv")
    assert str(exc.value).startswith("s.csv:2: rank 1 (row 2), column 2: invalid action '1X0'")
    with pytest.raises(CommlintInputError, match="stage 0 is computed on ranks 0 and 1"):
        loads_pipelining_csv("0F0\n0B0\n")
    with pytest.raises(CommlintInputError, match=r"stages \[1\] are never computed"):
        loads_pipelining_csv("0F0\n2F0\n")


def test_cli_detects_csv_and_reports(tmp_path, capsys):
    good = tmp_path / "good.csv"
    good.write_text("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("0B0,0F0\n1F0,1B0\n")
    assert detect_format(good) == "pipelining-csv"
    assert main(["plan", str(good)]) == 0
    assert main(["plan", str(good), str(bad)]) == 2
    captured = capsys.readouterr()
    assert f"{bad}: the compute-only schedule cannot be lowered" in captured.err
    assert "1 checked" in captured.out  # the good file was still checked


def test_findings_carry_the_row_as_line(tmp_path, capsys):
    path = tmp_path / "cycle.csv"
    path.write_text("0RECV_B0,0B0,0F0,0SEND_F0\n1RECV_F0,1F0,1B0,1SEND_B0\n")
    assert main(["plan", str(path), "--format", "json"]) == 1
    [finding] = json.loads(capsys.readouterr().out)["findings"]
    assert (finding["path"], finding["line"]) == (str(path), 1)
    assert [a["line"] for a in finding["actions"]] == [1, 2]


# ----------------------------------------------------------------------------- hostile sizes


def _run_limited(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    """`commlint …` in a child whose address space is capped at 1.5 GB: a file that asks
    for memory it does not hold fails the cap, not the machine."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))

    return subprocess.run(
        [sys.executable, "-m", "commlint", *args],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    ("text", "what", "row", "column"),
    [
        ("0F0\n1F0,999999999F0\n", "stage 999999999 (999999999F0)", 2, 2),
        ("0F0,0B0\n1F0,1B99999999999\n", "microbatch 99999999999 (1B99999999999)", 2, 2),
        ("0F0,0SEND_F0\n1RECV_F0,1F0,1SEND_B777777777\n", "stage 1 …", 2, 3),
    ],
)
def test_index_beyond_the_file_is_a_located_error_in_bounded_memory(
    tmp_path, text, what, row, column
):
    path = tmp_path / "tiny.csv"
    path.write_text(text)
    assert len(text) < 50
    if "…" not in what:
        with pytest.raises(CommlintInputError) as exc:
            loads_pipelining_csv(text, path=str(path))
        msg = str(exc.value)
        assert f"(row {row}), column {column}: {what}" in msg and "beyond what the file" in msg
    done = _run_limited(["plan", "--input-format", "pipelining-csv", "tiny.csv"], tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("commlint: error")]
    assert len(errors) == 1 and f"tiny.csv:{row}:" in errors[0], done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr


def test_index_of_thousands_of_digits_is_located():
    text = "0F0\n1F" + "9" * 5000 + "\n"
    located = r"\(row 2\), column 1: 1F9{38}…: index of 5000 digits is beyond"
    with pytest.raises(CommlintInputError, match=located):
        loads_pipelining_csv(text)


def test_generate_schedule_csv_is_bounded_too():
    from commlint.plans import schedules as sch

    with pytest.raises(CommlintInputError, match=r"row 2, column 1: 999999999F0: index 999999999"):
        sch.read_csv("0F0,0B0\n999999999F0\n", "s.csv")
    with pytest.raises(CommlintInputError, match=r"stages \[1\] are never computed"):
        sch.read_csv("0F0,0B0\n2F0,2B0\n", "s.csv")  # a near miss keeps the precise message


def test_many_missing_stages_are_summarised():
    cells = ",".join(f"{s}F0" for s in range(0, 60, 2))
    with pytest.raises(CommlintInputError, match=r"stages \[1, 3, .*, 19\] and 19 more"):
        loads_pipelining_csv(cells + "\n")


@pytest.mark.parametrize("kind", ["clean", "cycle", "missing_send"])
def test_checker_reads_compact_rows_as_it_reads_actions(tmp_path, kind):
    """A schedule's ranks are compact rows until read: the checker's verdict on them equals its
    verdict on the built `Action`s, and a clean schedule is checked without building any."""
    if kind == "clean":
        sched = torch_schedule("ScheduleInterleaved1F1B", False, 4, 8)
        path = tmp_path / "clean.csv"
        sched._dump_csv(str(path), "compute_only")
    else:
        path = tmp_path / f"{kind}.csv"
        text = {
            "cycle": "0RECV_B0,0B0,0F0,0SEND_F0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
            "missing_send": "0F0\n1RECV_F0,1F0\n",
        }[kind]
        path.write_text(text)
    fmt = "compute_comms" if kind == "missing_send" else "auto"
    lazy, built = load_pipelining_csv(path, fmt), load_pipelining_csv(path, fmt)
    built.ranks.build_all()  # every rank an `Action` list: the checker reads those instead
    assert all(built.ranks.compact_rows(r) is None for r in built.ranks)
    assert all(lazy.ranks.compact_rows(r) is not None for r in lazy.ranks)
    assert lazy.num_actions() == built.num_actions() > 0
    assert lazy.ranks.unbuilt() == len(lazy.ranks)  # counting built nothing

    def verdict(trace):
        found = check(trace, "all").findings
        return [(f.code, f.message, [(a.rank, a.action) for a in f.actions]) for f in found]

    ours = verdict(lazy)
    assert ours == verdict(built)
    assert bool(ours) == (kind != "clean")
    if kind == "clean":
        assert lazy.ranks.unbuilt() == len(lazy.ranks)


@pytest.mark.parametrize("n_stages", [1, 2, 3, 4, 6])
def test_fsdp_steps_equal_torch_on_random_rows(n_stages):
    """UNSHARD/RESHARD/REDUCE_GRAD placement equals torch's `_add_unshard_reshard` +
    `_add_reduce_grad`, on rows of up to 3 stages (placed without a window) and more."""
    import random

    from commlint.plans.importers.pipelining_csv import _add_fsdp_steps

    rng = random.Random(n_stages)
    for _ in range(40):
        microbatches = rng.randint(1, 4)
        cells = [
            f"{stage}{kind}{mb}"
            for stage in range(n_stages)
            for mb in range(microbatches)
            for kind in ("F", "B")
        ]
        rng.shuffle(cells)
        ours = [str(a) for a in _add_fsdp_steps([parse_action(c) for c in cells], microbatches)]
        theirs = schedules._add_reduce_grad(
            schedules._add_unshard_reshard([schedules._Action.from_str(c) for c in cells]),
            microbatches,
        )
        assert ours == [str(a) for a in theirs if a is not None], cells
