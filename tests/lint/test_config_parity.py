"""ruff parity of `commlint check`'s selection and configuration: unknown selectors, broken or
unknown configuration, ruff's specificity order, `exclude` that still summarises, the progress
bar."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from commlint.cli import main
from commlint.lint import engine
from commlint.lint.config import LintConfig
from commlint.lint.engine import LintOptions, enabled_codes, lint_paths

BAD = """\
import torch.distributed as dist


def save(t):
    if dist.get_rank() == 0:
        dist.barrier()
"""


def write(root: Path, name: str, text: str) -> Path:
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check", "--no-cache", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("flag", ["--select", "--ignore", "--extend-select"])
def test_unknown_selector_on_the_command_line_is_exit_2(flag, tmp_path, capsys):
    write(tmp_path, "bad.py", BAD)
    code, out, err = run(capsys, flag, "CL101,FOO", str(tmp_path))
    assert code == 2 and out == ""
    assert err.strip() == f"commlint: error: unknown rule selector 'FOO' in {flag}"


def test_unknown_selector_in_config_names_file_and_line(tmp_path, capsys):
    write(tmp_path, "pyproject.toml", '[tool.commlint]\nselect = ["CL1"]\nignore = ["CL1O1"]\n')
    write(tmp_path, "bad.py", BAD)
    code, _, err = run(capsys, str(tmp_path))
    assert code == 2
    assert err.strip() == (
        f"commlint: error: {tmp_path / 'pyproject.toml'}:3: unknown rule selector 'CL1O1' in "
        "[tool.commlint] ignore (did you mean 'CL101'?)"
    )


def test_broken_auto_discovered_pyproject_is_exit_2_with_line(tmp_path, capsys):
    write(tmp_path, "pyproject.toml", '[project]\nname = "x"\n[tool.commlint\nselect = 1\n')
    write(tmp_path, "pkg/bad.py", BAD)
    code, out, err = run(capsys, str(tmp_path / "pkg"))
    assert code == 2 and out == ""
    assert err.startswith(f"commlint: error: {tmp_path / 'pyproject.toml'}:3: invalid TOML")
    assert err.count("\n") == 1


def test_unknown_config_key_warns_with_a_suggestion_and_still_checks(tmp_path, capsys):
    write(tmp_path, "pyproject.toml", '[tool.commlint]\nignore = []\nexlude = ["x/"]\n')
    write(tmp_path, "bad.py", BAD)
    code, out, err = run(capsys, str(tmp_path))
    assert code == 1 and "CL101" in out
    assert err.strip() == (
        f"commlint: warning: {tmp_path / 'pyproject.toml'}:3: unknown key 'exlude' in "
        "[tool.commlint], ignored (did you mean 'exclude'?)"
    )


def codes_for(config: LintConfig, **opts) -> list[str]:
    return sorted(enabled_codes(config, LintOptions(**opts)))


def test_more_specific_selector_wins_as_in_ruff(tmp_path):
    cfg = LintConfig(root=tmp_path)
    got = codes_for(cfg, select=["CL1"], ignore=["CL10"], extend_select=["CL101"])
    assert "CL101" in got and "CL111" in got
    assert not {"CL100", "CL102", "CL109"} & set(got)
    # same specificity: ignore wins
    assert "CL101" not in codes_for(cfg, select=["CL101"], ignore=["CL101"])
    # a more specific select beats a less specific ignore in the same layer
    assert codes_for(cfg, select=["CL101"], ignore=["CL1"]) == ["CL101"]
    # ALL is the least specific of all
    assert "CL105" not in codes_for(cfg, select=["ALL"], ignore=["CL105"])
    # layers: the command line's select replaces the configuration's, its ignore adds to it
    cfg = LintConfig(root=tmp_path, select=["CL10"], ignore=["CL101"])
    assert "CL101" not in codes_for(cfg) and "CL102" in codes_for(cfg)
    assert codes_for(cfg, select=["CL101"]) == ["CL101"]
    assert "CL111" in codes_for(cfg, extend_select=["CL111"])
    assert "CL102" not in codes_for(cfg, ignore=["CL102"])


def test_excluded_file_is_summarised_for_callers_but_not_reported(tmp_path, capsys):
    write(tmp_path, "pyproject.toml", '[tool.commlint]\nexclude = ["vendored/"]\n')
    write(
        tmp_path,
        "src/vendored/helpers/comm.py",
        "import torch.distributed as dist\n\n\ndef sync(t):\n    dist.all_reduce(t)\n\n\n"
        + BAD.split("\n\n\n", 1)[1],
    )
    write(
        tmp_path,
        "src/train.py",
        "import torch.distributed as dist\nfrom vendored.helpers.comm import sync\n\n\n"
        "def step(t):\n    if dist.get_rank() == 0:\n        sync(t)\n",
    )
    code, out, _ = run(capsys, "--format", "json", str(tmp_path / "src"))
    data = json.loads(out)
    got = [(Path(f["path"]).name, f["line"], f["code"]) for f in data["findings"]]
    assert got == [("train.py", 7, "CL101")]  # found through the excluded helper
    assert "all_reduce" in data["findings"][0]["message"]
    assert code == 1


def test_progress_bar_only_on_a_terminal_and_after_the_delay(tmp_path, monkeypatch, capsys):
    from rich.console import Console

    for k in range(3):
        write(tmp_path, f"m{k}.py", BAD)
    real = engine._extract_serial

    def slow(task):
        time.sleep(0.2)
        return real(task)

    monkeypatch.setattr(engine, "_extract_serial", slow)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    opts = dict(cache=False, jobs=1, progress_after=0.1, progress_console=console)
    report = lint_paths([str(tmp_path)], LintConfig(root=tmp_path), LintOptions(**opts))
    assert len(report.findings) == 3
    drawn = buf.getvalue()
    assert "commlint check" in drawn and "/3" in drawn and "ETA" in drawn
    # not a terminal (pytest's captured stderr): silent
    report = lint_paths(
        [str(tmp_path)],
        LintConfig(root=tmp_path),
        LintOptions(cache=False, jobs=1, progress_after=0.0),
    )
    assert capsys.readouterr().err == ""
    # a short run on a terminal stays silent too
    buf2 = io.StringIO()
    quick = LintOptions(
        cache=False,
        jobs=1,
        progress_after=60.0,
        progress_console=Console(file=buf2, force_terminal=True),
    )
    lint_paths([str(tmp_path)], LintConfig(root=tmp_path), quick)
    assert buf2.getvalue() == ""
