"""`commlint check` as users drive it: selection, suppression, config, exit codes, bad input,
parallelism, the cache and --diff."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from commlint.cli import main

BAD = """\
import torch.distributed as dist


def save(t):
    if dist.get_rank() == 0:
        dist.barrier()
"""
ASYNC = """\
import torch.distributed as dist


def go(t):
    dist.irecv(t, src=0)
"""
GOOD = """\
import torch.distributed as dist


def save(t):
    dist.barrier()
"""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check", "--no-cache", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(folder: Path, name: str, text: str) -> Path:
    p = folder / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def codes(out: str) -> list[tuple[str, int]]:
    data = json.loads(out)
    return sorted((f["code"], f["line"]) for f in data["findings"])


def test_exit_codes_and_exit_zero(tmp_path, capsys):
    write(tmp_path, "good.py", GOOD)
    assert run(capsys, str(tmp_path / "good.py"))[0] == 0
    write(tmp_path, "bad.py", BAD)
    assert run(capsys, str(tmp_path))[0] == 1
    assert run(capsys, "--exit-zero", str(tmp_path))[0] == 0
    code, _, err = run(capsys, str(tmp_path / "missing.py"))
    assert code == 2 and "missing.py: No such file or directory" in err


def test_json_finding_has_locations_related_and_fix(tmp_path, capsys):
    write(tmp_path, "bad.py", BAD)
    _code, out, _ = run(capsys, "--format", "json", str(tmp_path))
    (f,) = json.loads(out)["findings"]
    assert (f["code"], f["line"], f["col"], f["end_line"], f["end_col"]) == (
        "CL101",
        6,
        9,
        6,
        23,
    )
    assert f["related"][0]["line"] == 5 and "rank" in f["related"][0]["message"]
    assert "barrier" in f["message"] and "hang" in f["message"]
    assert f["fix"]


def test_select_ignore_extend_select_prefixes(tmp_path, capsys):
    write(tmp_path, "bad.py", BAD)
    write(tmp_path, "async_.py", ASYNC)
    both = codes(run(capsys, "--format", "json", str(tmp_path))[1])
    assert [c for c, _ in both] == ["CL101", "CL111"]
    only = codes(run(capsys, "--format", "json", "--select", "CL11", str(tmp_path))[1])
    assert [c for c, _ in only] == ["CL111"]
    ign = codes(run(capsys, "--format", "json", "--ignore", "CL101", str(tmp_path))[1])
    assert [c for c, _ in ign] == ["CL111"]
    ext = run(
        capsys, "--format", "json", "--select", "CL111", "--extend-select", "CL101", str(tmp_path)
    )[1]
    assert [c for c, _ in codes(ext)] == ["CL101", "CL111"]
    allc = codes(run(capsys, "--format", "json", "--select", "ALL", str(tmp_path))[1])
    assert allc == both


def test_noqa_on_line_and_statement_first_line_and_unused(tmp_path, capsys):
    src = BAD.replace("dist.barrier()", "dist.barrier(  # noqa: CL101\n        )")
    write(tmp_path, "a.py", src)
    write(tmp_path, "b.py", BAD.replace("dist.barrier()", "dist.barrier()  # noqa: CL1"))
    write(tmp_path, "c.py", GOOD.replace("dist.barrier()", "dist.barrier()  # noqa: CL101, E501"))
    out = run(capsys, "--format", "json", str(tmp_path))[1]
    data = json.loads(out)["findings"]
    assert [(Path(f["path"]).name, f["code"]) for f in data] == [("c.py", "CL113")]
    assert "CL101" in data[0]["message"] and "E501" not in data[0]["message"]
    # CL113 is not reported when it is not selected
    out = run(capsys, "--format", "json", "--ignore", "CL113", str(tmp_path))[1]
    assert json.loads(out)["findings"] == []


def test_pyproject_config_and_cli_override(tmp_path, capsys):
    write(
        tmp_path,
        "pyproject.toml",
        '[tool.commlint]\nignore = ["CL101"]\nrank-helpers = ["am_leader"]\n',
    )
    write(tmp_path, "pkg/bad.py", BAD)
    write(
        tmp_path,
        "pkg/custom.py",
        "import torch.distributed as dist\n\n\n"
        "def f(t):\n    if am_leader():\n        dist.all_reduce(t)\n",
    )
    out = run(capsys, "--format", "json", "--select", "CL1", str(tmp_path / "pkg"))[1]
    got = [(Path(f["path"]).name, f["code"]) for f in json.loads(out)["findings"]]
    assert got == [("bad.py", "CL101"), ("custom.py", "CL101")]
    # the config's ignore applies unless the command line selects again (as ruff)
    out = run(capsys, "--format", "json", str(tmp_path / "pkg"))[1]
    assert [f["code"] for f in json.loads(out)["findings"]] == []
    out = run(capsys, "--format", "json", "--select", "CL101", str(tmp_path / "pkg"))[1]
    assert len(json.loads(out)["findings"]) == 2


def test_bad_config_is_a_one_line_error(tmp_path, capsys):
    write(tmp_path, "pyproject.toml", "[tool.commlint]\nselect = 3\n")
    write(tmp_path, "bad.py", BAD)
    code, _out, err = run(capsys, str(tmp_path))
    assert code == 2
    assert err.strip().count("\n") == 0 and "pyproject.toml" in err and "select" in err


def test_syntax_error_and_non_utf8_are_findings_others_still_checked(tmp_path, capsys):
    write(tmp_path, "broken.py", "import torch.distributed as dist\ndef f(:\n")
    (tmp_path / "latin.py").write_bytes(b"import torch.distributed\nx = '\xe9'\n")
    write(tmp_path, "bad.py", BAD)
    code, out, err = run(capsys, "--format", "json", str(tmp_path))
    assert code == 1 and "Traceback" not in err
    got = codes(out)
    assert ("CL100", 2) in got and ("CL101", 6) in got
    msgs = {Path(f["path"]).name: f["message"] for f in json.loads(out)["findings"]}
    assert "UTF-8" in msgs["latin.py"] and "syntax error" in msgs["broken.py"]


def test_statistics(tmp_path, capsys):
    write(tmp_path, "bad.py", BAD)
    write(tmp_path, "bad2.py", BAD)
    write(tmp_path, "async_.py", ASYNC)
    code, out, _ = run(capsys, "--statistics", str(tmp_path))
    assert code == 1
    assert out.splitlines() == [
        "2\tCL101\t[error]  \tconditional-collective",
        "1\tCL111\t[warning]\tunwaited-async",
    ]


def test_files_without_distributed_code_are_skipped_before_parsing(tmp_path, monkeypatch):
    from commlint.lint import engine

    write(tmp_path, "plain.py", "def f(:\n")  # would be a syntax error if parsed
    report = engine.lint_paths(
        [str(tmp_path)], engine.LintConfig(root=tmp_path), engine.LintOptions(cache=False)
    )
    assert report.findings == [] and report.checked == 1


def test_cache_hit_skips_parsing_and_gives_same_findings(tmp_path, monkeypatch):
    from commlint.lint import engine, extract

    write(tmp_path, "bad.py", BAD)
    opts = engine.LintOptions(cache=True, cache_dir=tmp_path / "cache")
    cfg = engine.LintConfig(root=tmp_path)
    first = engine.lint_paths([str(tmp_path / "bad.py")], cfg, opts)

    def boom(self):
        raise AssertionError("parsed although cached")

    monkeypatch.setattr(extract.Extractor, "run", boom)
    second = engine.lint_paths([str(tmp_path / "bad.py")], cfg, opts)
    assert [f.model_dump() for f in second.findings] == [f.model_dump() for f in first.findings]
    # a changed file is parsed again
    write(tmp_path, "bad.py", BAD + "\n")
    third = engine.lint_paths([str(tmp_path / "bad.py")], cfg, opts)
    assert any("parsed although cached" in e.message for e in third.errors)


def test_parallel_jobs_give_the_same_findings(tmp_path):
    from commlint.lint import engine

    for k in range(20):
        write(tmp_path, f"m{k}.py", BAD if k % 2 else ASYNC)
    cfg = engine.LintConfig(root=tmp_path)
    serial = engine.lint_paths([str(tmp_path)], cfg, engine.LintOptions(cache=False, jobs=1))
    par = engine.lint_paths([str(tmp_path)], cfg, engine.LintOptions(cache=False, jobs=2))
    key = sorted((f.path, f.line, f.code) for f in serial.findings)
    assert len(key) == 20
    assert key == sorted((f.path, f.line, f.code) for f in par.findings)


def test_diff_reports_only_changed_lines(tmp_path, capsys, monkeypatch):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    write(tmp_path, "old.py", BAD)
    git("add", "old.py")
    git("commit", "-qm", "base")
    write(
        tmp_path,
        "old.py",
        BAD + "\n\ndef more(t):\n    if dist.get_rank() == 1:\n        dist.all_reduce(t)\n",
    )
    monkeypatch.chdir(tmp_path)
    out = run(capsys, "--format", "json", "--diff", "HEAD", "old.py")[1]
    assert codes(out) == [("CL101", 11)]
    code, _, err = run(capsys, "--diff", "no-such-ref", "old.py")
    assert code == 2 and "no-such-ref" in err


def test_user_wrappers_group_getters_and_exclude_from_config(tmp_path, capsys):
    write(
        tmp_path,
        "pyproject.toml",
        "[tool.commlint]\n"
        'exclude = ["vendored/"]\n'
        "[tool.commlint.calls]\n"
        '"mylib.comm.sync_grads" = { kind = "collective", op = "all_reduce", '
        'group = [1, "group"] }\n'
        "[tool.commlint.rank-sources]\n"
        '"mylib.groups.tp_rank" = { dims = ["tp"] }\n'
        "[tool.commlint.group-getters]\n"
        '"mylib.groups.tp_group" = { group = "tp", dims = ["tp"] }\n'
        '"mylib.groups.dp_group" = { group = "dp", dims = ["dp"] }\n',
    )
    write(
        tmp_path,
        "src/train.py",
        "from mylib.comm import sync_grads\n"
        "from mylib.groups import dp_group, tp_group, tp_rank\n\n\n"
        "def step(g):\n"
        "    if tp_rank() == 0:\n"
        "        sync_grads(g, dp_group())\n"  # orthogonal group: fine
        "        sync_grads(g, group=tp_group())\n",  # the group the condition splits
    )
    write(tmp_path, "src/vendored/bad.py", BAD)
    out = run(capsys, "--format", "json", str(tmp_path / "src"))[1]
    got = [(Path(f["path"]).name, f["line"], f["code"]) for f in json.loads(out)["findings"]]
    assert got == [("train.py", 8, "CL101")]


def test_an_internal_error_on_one_file_is_reported_and_others_are_checked(
    tmp_path, capsys, monkeypatch
):
    from commlint.lint import extract

    real_run = extract.Extractor.run

    def flaky(self):
        if self.path.endswith("boom.py"):
            raise KeyError("surprise")
        return real_run(self)

    monkeypatch.setattr(extract.Extractor, "run", flaky)
    write(tmp_path, "boom.py", BAD)
    write(tmp_path, "bad.py", BAD)
    code, out, err = run(capsys, "--format", "json", str(tmp_path))
    assert code == 2
    assert "boom.py: internal error while analysing: KeyError" in err
    assert [Path(f["path"]).name for f in json.loads(out)["findings"]] == ["bad.py"]
