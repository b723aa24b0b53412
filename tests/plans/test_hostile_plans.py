"""Hostile plan files (issue 13): bounded work, located errors, exit 2, the rest still checked.

The crafted cases that crashed the process natively run the CLI in a subprocess, so a
segfault shows up as a negative return code instead of killing the test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans.io import MAX_DEPTH, load_trace, loads_trace, yaml_depth_error
from commlint.trace import MAX_WORLD_SIZE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "importers"))
import nnscaler_gen

# rank 1 never joins the barrier: one finding (CL202), so "still checked" is visible
HANG = "version: 1\nworld_size: 2\nranks:\n  0: [{op: barrier}]\n  1: []\n"


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "commlint", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _error(text: str, is_json: bool = False) -> CommlintInputError:
    with pytest.raises(CommlintInputError) as info:
        loads_trace(text, is_json=is_json, path="p")
    return info.value


def test_yaml_nested_30000_deep_is_refused_before_parsing(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("version: 1\nworld_size: 2\nmeta: " + "[" * 30_000 + "]" * 30_000 + "\n")
    hang = tmp_path / "hang.yaml"
    hang.write_text(HANG)
    proc = _cli("plan", str(deep), str(hang))
    assert proc.returncode == 2, proc.stderr  # not -11 (SIGSEGV in PyYAML's C parser)
    assert f"{deep}:3: too deeply nested (depth > {MAX_DEPTH})" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "CL202" in proc.stdout  # the other input was still checked
    assert "All checks passed" not in proc.stdout


def test_yaml_depth_scan_counts_block_and_flow_levels() -> None:
    block = "".join(f"{' ' * i}k{i}:\n" for i in range(MAX_DEPTH + 5)) + " " * 200 + "x: 1\n"
    assert yaml_depth_error(block) == MAX_DEPTH + 1
    assert yaml_depth_error("a:\n  " + "- " * (MAX_DEPTH + 3) + "1\n") == 2
    flow_over_lines = "a: [\n" + "[\n" * (MAX_DEPTH + 1) + "]\n" * (MAX_DEPTH + 1) + "]\n"
    assert yaml_depth_error(flow_over_lines) is not None
    # brackets inside quotes, comments and plain scalars are not nesting
    harmless = (
        "version: 1  # [[[[[[\n"
        + "label: F[3\n"
        + "s: '"
        + "[" * 500
        + "'\n"
        + 't: "'
        + "{" * 500
        + '"\n'
    )
    assert yaml_depth_error(harmless) is None
    # a real plan file nests 5-6 levels
    assert yaml_depth_error(HANG + "groups:\n  g: [0, 1]\nmeta: {a: {b: [[1]]}}\n") is None


def test_json_nested_1000_deep_is_a_located_error() -> None:
    text = '{"version": 1,\n"world_size": 2,\n"meta": ' + "[" * 1000 + "]" * 1000 + "}"
    err = _error(text, is_json=True).error
    assert err.line == 3
    assert f"too deeply nested (depth > {MAX_DEPTH})" in err.message


@pytest.mark.parametrize("is_json", [False, True])
def test_world_size_of_5000_digits(is_json: bool) -> None:
    text = (
        '{"version": 1,\n"world_size": ' + "9" * 5000 + "}"
        if is_json
        else "version: 1\nworld_size: " + "9" * 5000 + "\n"
    )
    err = _error(text, is_json).error
    assert err.line == 2
    assert "5000 digits is too long" in err.message


def test_world_size_bool_and_huge_are_refused() -> None:
    err = _error("version: 1\nworld_size: true\n").error
    assert (err.line, "world_size") == (2, "world_size") and "integer" in err.message
    err = _error("version: 1\nworld_size: 1000000000\n").error
    assert err.line == 2 and str(MAX_WORLD_SIZE) in err.message


def test_largest_world_without_actions_is_checked(tmp_path: Path) -> None:
    """Ranks without actions are legal: the largest world size is checked, not refused."""
    plan = tmp_path / "w.yaml"
    plan.write_text(f"version: 1\nworld_size: {MAX_WORLD_SIZE}\n")
    assert main(["plan", str(plan)]) == 0


@pytest.mark.parametrize(
    ("text", "is_json", "line", "key"),
    [
        ("version: 1\nworld_size: 2\nworld_size: 3\n", False, 3, "world_size"),
        ("version: 1\nworld_size: 2\nranks:\n  0: [{op: barrier, op: sync}]\n", False, 4, "op"),
        ('{"version": 1,\n"world_size": 2,\n"world_size": 3}', True, 3, "world_size"),
        (
            '{"version": 1, "world_size": 2, "ranks": {"0":\n[{"op": "sync", "op": "sync"}]}}',
            True,
            2,
            "op",
        ),
    ],
)
def test_duplicate_keys_are_refused_with_their_line(
    text: str, is_json: bool, line: int, key: str
) -> None:
    err = _error(text, is_json).error
    assert err.line == line
    assert f"duplicate key '{key}'" in err.message


def test_aliases_that_expand_beyond_the_file_are_refused() -> None:
    lines = ["version: 1", "world_size: 2", "meta:", "  a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    err = _error("\n".join(lines) + "\n").error
    assert "anchors and aliases expand" in err.message
    # ordinary reuse of a rank's program is fine
    ok = "version: 1\nworld_size: 3\nranks:\n  0: &r [{op: barrier}]\n  1: *r\n  2: *r\n"
    assert loads_trace(ok).num_actions() == 3


def test_generate_world_of_a_billion_is_refused_before_expansion(tmp_path: Path) -> None:
    plan = tmp_path / "g.yaml"
    plan.write_text("version: 1\ngenerate: {world_size: 1000000000}\n")
    with pytest.raises(CommlintInputError) as info:
        load_trace(plan)
    assert info.value.error.line == 2
    assert "world size 1000000000 is more than commlint generates" in info.value.error.message
    plan.write_text("version: 1\ngenerate: {degrees: {pp: 2}, microbatches: 100000000}\n")
    with pytest.raises(CommlintInputError) as info:
        load_trace(plan)
    assert "microbatches" in info.value.error.message


def test_nnscaler_undefined_reducer_is_located(tmp_path: Path) -> None:
    folder = nnscaler_gen.tp_dp(tmp_path / "nn")
    gen1 = folder / "gencode1.py"
    text = gen1.read_text()
    assert "self.wreducer80.sync_grads()" in text
    gen1.write_text(text.replace("self.wreducer80.sync_grads()", "self.wreducer99.sync_grads()"))
    line = 1 + gen1.read_text().splitlines().index("        self.wreducer99.sync_grads()")
    hang = tmp_path / "hang.yaml"
    hang.write_text(HANG)
    proc = _cli("plan", str(folder), str(hang))
    assert proc.returncode == 2
    assert f"{gen1}:{line}: uses reducer 'wreducer99', which __init__ never creates" in (
        proc.stderr
    )
    assert "CL202" in proc.stdout


def test_an_exit_2_never_says_all_checks_passed(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nworld_size: true\n")
    good = tmp_path / "good.yaml"
    good.write_text("version: 1\nworld_size: 2\nranks: {0: [{op: barrier}], 1: [{op: barrier}]}\n")
    assert main(["plan", str(bad)]) == 2
    out = capsys.readouterr().out
    assert "All checks passed" not in out
    assert "1 input could not be checked" in out
    assert main(["plan", str(bad), str(good)]) == 2
    out = capsys.readouterr().out
    assert "All checks passed" not in out
    assert "No findings in 1 checked; 1 input could not be checked" in out
    assert main(["plan", str(good)]) == 0
    assert "All checks passed (1 checked)." in capsys.readouterr().out


def test_a_bug_on_one_input_names_it_and_the_others_are_checked(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    import commlint.graph.check as check_mod

    real = check_mod.check_trace
    boom = tmp_path / "boom.yaml"
    boom.write_text("version: 1\nworld_size: 3\n")
    hang = tmp_path / "hang.yaml"
    hang.write_text(HANG)

    def flaky(trace, *args, **kwargs):
        if trace.world_size == 3:
            raise KeyError("x")
        return real(trace, *args, **kwargs)

    monkeypatch.setattr(check_mod, "check_trace", flaky)
    assert main(["plan", str(boom), str(hang)]) == 2
    captured = capsys.readouterr()
    assert f"{boom}: internal error: KeyError: 'x'" in captured.err
    assert "CL202" in captured.out


def test_json_lines_are_found_when_a_finding_asks(tmp_path: Path) -> None:
    """No second parse for line numbers: the lazy map places findings and errors on the same
    lines the YAML composer gave before."""
    plan = tmp_path / "p.json"
    plan.write_text(
        '{"version": 1, "world_size": 2,\n "meta": {"x": "]}\\"[{"},\n "ranks": {\n'
        '  "0": [\n   {"op": "barrier"},\n   {"op": "all_reduce", "label": "a,b]"}\n  ],\n'
        '  "1": [{"op": "barrier"}]\n }\n}\n'
    )
    result = main(["plan", str(plan), "--format", "json", "-o", str(tmp_path / "r.json")])
    assert result == 1
    report = json.loads((tmp_path / "r.json").read_text())
    [finding] = report["findings"]
    assert (finding["code"], finding["line"]) == ("CL202", 6)
    plan.write_text(plan.read_text().replace('"label": "a,b]"', '"peer": 1'))
    with pytest.raises(CommlintInputError) as info:
        load_trace(plan)
    assert info.value.error.line == 6
    assert "rank 0, action 1: 'peer' is only for send/recv/isend/irecv" in info.value.error.message


def test_equal_actions_are_stored_once_and_a_deep_copy_is_editable() -> None:
    text = json.dumps(
        {
            "version": 1,
            "world_size": 4,
            "ranks": {str(r): [{"op": "all_reduce", "shape": [4]}] * 3 for r in range(4)},
        }
    )
    trace = loads_trace(text, is_json=True)
    first = trace.ranks[0][0]
    assert all(a is first for acts in trace.ranks.values() for a in acts)
    with pytest.raises(ValueError, match="frozen"):
        first.tag = 3
    mine = trace.model_copy(deep=True)
    mine.ranks[2][1].tag = 3
    assert [a.tag for acts in mine.ranks.values() for a in acts].count(3) == 1
    assert first.tag == 0


def test_fifos_and_symlink_loops_are_named_not_read(tmp_path: Path) -> None:
    """A FIFO named like a plan would block a reader forever: never opened, one error each."""
    folder = tmp_path / "plans"
    folder.mkdir()
    (folder / "good.yaml").write_text(HANG)
    os.mkfifo(folder / "pipe.json")
    (folder / "loop.yaml").symlink_to(folder / "loop2.yaml")
    (folder / "loop2.yaml").symlink_to(folder / "loop.yaml")
    fifo = tmp_path / "direct.yaml"
    os.mkfifo(fifo)
    proc = _cli("plan", str(fifo), str(folder), timeout=60)
    assert proc.returncode == 2
    assert f"{fifo}: not a regular file (a FIFO, socket or device): not read" in proc.stderr
    assert f"{folder / 'pipe.json'}: not a regular file" in proc.stderr
    assert f"{folder / 'loop.yaml'}: broken symbolic link or symbolic link loop" in proc.stderr
    assert "CL202" in proc.stdout  # good.yaml was checked
