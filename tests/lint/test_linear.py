"""`commlint check` does work linear in the size of what it checks (issue 29, item 7).

Time is measured by `bench/lint_limits.py` and `bench/noqa_linear.py`; these tests count the
work instead (calls of the pieces a super-linear pass repeated), so that they hold on a loaded
machine."""

from __future__ import annotations

from pathlib import Path

from commlint.lint.analyze import Program
from commlint.lint.config import LintConfig
from commlint.lint.engine import Limits, LintOptions, lint_paths

N = 150


def _block(n: int) -> str:
    body = "".join(f"    if rank == {k % 2}:\n        dist.all_reduce(y)\n" for k in range(n))
    return f"import torch.distributed as dist\n\n\ndef step(y, rank):\n{body}    return y\n"


def _lint(root: Path, **opts):
    return lint_paths([str(root)], LintConfig(root=root), LintOptions(cache=False, **opts))


def _counting_node_tokens(monkeypatch) -> list[int]:
    calls = [0]
    real = Program.node_tokens

    def counted(self, n, fn):
        calls[0] += 1
        return real(self, n, fn)

    monkeypatch.setattr(Program, "node_tokens", counted)
    return calls


def test_rank_tests_of_one_block_cost_linear_work(tmp_path, monkeypatch):
    """Each branch's compensation proof used to replay the whole block once per value: a
    function of n rank tests cost O(n^2) token look-ups (1,000 tests: 39 s of CPU)."""
    (tmp_path / "a.py").write_text(_block(N), encoding="utf-8")
    calls = _counting_node_tokens(monkeypatch)
    report = _lint(tmp_path, jobs=1)
    # every rank test is its own hang: rank 0 and rank 1 run different all_reduce lines
    assert sorted(f.line for f in report.findings if f.code == "CL101") == [
        6 + 2 * k for k in range(N)
    ]
    assert calls[0] < 30 * N, calls[0]


def test_a_compensated_block_is_still_proved_once_per_block(tmp_path, monkeypatch):
    """`if rank == 0: c()` followed by `if rank != 0: c()`, n times: every rank issues the same
    sequence, so no finding, and the proof is shared by the block's branches."""
    (tmp_path / "a.py").write_text(
        "import torch.distributed as dist\n\n\ndef step(y, rank):\n"
        + "".join(
            f"    if rank {'==' if k % 2 == 0 else '!='} 0:\n        dist.all_reduce(y)\n"
            for k in range(N)
        )
        + "    return y\n",
        encoding="utf-8",
    )
    calls = _counting_node_tokens(monkeypatch)
    report = _lint(tmp_path, jobs=1)
    assert [f for f in report.findings if f.code in ("CL101", "CL102")] == []
    assert calls[0] < 30 * N, calls[0]


BAD = """\
import torch.distributed as dist


def save(t):
    if dist.get_rank() == 0:
        dist.barrier()
"""


def test_with_jobs_a_slow_file_is_stopped_at_the_limit_and_the_others_are_reported(
    tmp_path, monkeypatch
):
    """`-j 2` over 20 files, one of which never finishes its analysis: it is stopped by the
    per-file CPU limit (CL114) and the 19 others' findings are all reported, by the workers
    that the slow file did not hold."""
    from commlint.lint import extract

    real_run = extract.Extractor.run

    def slow(self):
        if self.path.endswith("slow.py"):
            while True:  # burns CPU in the forked worker until the limit interrupts it
                pass
        return real_run(self)

    monkeypatch.setattr(extract.Extractor, "run", slow)
    for k in range(19):
        (tmp_path / f"m{k:02}.py").write_text(BAD, encoding="utf-8")
    (tmp_path / "slow.py").write_text(BAD, encoding="utf-8")
    report = _lint(tmp_path, jobs=2, limits=Limits(time_limit=1.0))
    codes = {(Path(f.path).name, f.code) for f in report.findings}
    assert codes == {(f"m{k:02}.py", "CL101") for k in range(19)} | {("slow.py", "CL114")}
    (slow_note,) = [f for f in report.findings if f.path.endswith("slow.py")]
    assert "too slow to analyse (stopped after 1 s of CPU time)" in slow_note.message


def test_a_chain_of_helpers_is_inlined_to_a_bounded_depth(tmp_path, monkeypatch):
    """`f_k` calls `f_{k-1}` (under a conditional expression), n times: each summary used to
    carry the whole chain below it, n calls deep, so rebasing it at every call cost O(n^2)
    (1,200 helpers: 90 s of CPU). Inlining stops MAX_DEPTH calls deep, whichever order the
    summaries are computed in; the rank-0-only call at the top is still found."""
    n = 200
    helpers = "".join(
        f"\n\ndef f{k}(y, rank):\n    dist.all_reduce(y)\n"
        f"    return f{k - 1}(y, rank) if {k} else y\n"
        for k in range(n)
    )
    main = f"\n\ndef main(rank):\n    if rank == 0:\n        f{n - 1}(1, rank)\n"
    (tmp_path / "a.py").write_text("import torch.distributed as dist\n" + helpers + main)
    calls = [0]
    real = Program.rebase

    def counted(self, *args):
        calls[0] += 1
        return real(self, *args)

    monkeypatch.setattr(Program, "rebase", counted)
    report = _lint(tmp_path, jobs=1)
    # one finding: the call under `if rank == 0`
    assert [(f.code, f.line) for f in report.findings] == [("CL101", 5 * n + 6)]
    assert calls[0] < 40 * n, calls[0]


def test_the_cyclic_collector_never_walks_a_file_being_analysed(tmp_path, monkeypatch):
    """A file's trees are millions of objects that live until it is done and are freed by
    reference counting; the cyclic collector, left on, walked all of them every time the heap
    grew by a quarter (a third of the CPU time on a 2 MB file). Count its passes while a file
    is extracted and while its ranks are evaluated: none."""
    import gc

    from commlint.lint.extract import Extractor
    from commlint.lint.perrank import FileEval

    n = 300
    (tmp_path / "a.py").write_text(
        "import torch.distributed as dist\n"
        + "".join(
            f"\ndef step_{k}(x, rank):\n    y = x * {k}\n    if rank == {k % 4}:\n"
            f"        dist.all_reduce(y)\n    return y + {k}\n"
            for k in range(n)
        ),
        encoding="utf-8",
    )
    inside = [0]
    passes: list[int] = []

    def counting(phase: str, info: dict) -> None:
        if phase == "start" and inside[0]:
            passes.append(info["generation"])

    def watched(real):
        def run(self):
            inside[0] += 1
            try:
                return real(self)
            finally:
                inside[0] -= 1

        return run

    monkeypatch.setattr(Extractor, "run", watched(Extractor.run))
    monkeypatch.setattr(FileEval, "run", watched(FileEval.run))
    # on before the run whatever an earlier test in this worker left it (torch's own helpers
    # pause it too): the lint must hand it back on
    was_enabled = gc.isenabled()
    gc.enable()
    gc.callbacks.append(counting)
    try:
        report = _lint(tmp_path, jobs=1)
        enabled_after = gc.isenabled()
    finally:
        gc.callbacks.remove(counting)
        if not was_enabled:
            gc.disable()
    assert sum(f.code == "CL101" for f in report.findings) == n
    assert passes == []
    assert enabled_after  # and it is on again after the run


def test_the_facts_are_kept_out_of_the_collectors_walks_until_the_report(tmp_path, monkeypatch):
    """Once every file is extracted its facts live to the end of the run: frozen (`gc.freeze`)
    while the rules run, so that no collection walks them again, and handed back after."""
    import gc

    from commlint.lint.perrank import FileEval

    (tmp_path / "a.py").write_text(_block(4), encoding="utf-8")
    frozen: list[int] = []
    real = FileEval.run

    def run(self):
        frozen.append(gc.get_freeze_count())
        return real(self)

    monkeypatch.setattr(FileEval, "run", run)
    assert gc.get_freeze_count() == 0
    report = _lint(tmp_path, jobs=1)
    assert sum(f.code == "CL101" for f in report.findings) == 4
    assert frozen and min(frozen) > 0
    assert gc.get_freeze_count() == 0


def test_facts_read_from_the_cache_are_never_walked_while_they_are_read(tmp_path, monkeypatch):
    """A cached run reads every file's facts back with `pickle`: millions of objects on a large
    project, none in a reference cycle. With the collector on, its passes walked them while
    they were unpickled (1.3 of the 1.6 CPU s a cached run of megatron-core and deepspeed
    spent reading); they are now read with it held off, and frozen before it resumes. Count
    its passes from the first cache read to the analysis of the program: none."""
    import gc

    from commlint.lint import engine

    n, per_file = 40, 15
    project = tmp_path / "project"
    project.mkdir()
    for k in range(n):
        (project / f"m{k}.py").write_text(
            "import torch.distributed as dist\n"
            + "".join(
                f"\ndef step_{j}(x, rank):\n    if rank == {j % 2}:\n"
                f"        dist.all_reduce(x)\n    dist.barrier()\n    return x\n"
                for j in range(per_file)
            ),
            encoding="utf-8",
        )
    opts = LintOptions(cache=True, cache_dir=tmp_path / "cache", jobs=1)
    cold = lint_paths([str(project)], LintConfig(root=project), opts)

    reading = [False]
    hits = [0]
    passes: list[int] = []
    frozen: list[int] = []
    real_get, real_program = engine.Cache.get, engine.Program

    def get(self, key):
        reading[0] = True
        got = real_get(self, key)
        hits[0] += got is not None
        return got

    def program(*args, **kwargs):
        reading[0] = False
        frozen.append(gc.get_freeze_count())
        return real_program(*args, **kwargs)

    def counting(phase: str, info: dict) -> None:
        if phase == "start" and reading[0]:
            passes.append(info["generation"])

    monkeypatch.setattr(engine.Cache, "get", get)
    monkeypatch.setattr(engine, "Program", program)
    was_enabled = gc.isenabled()
    gc.enable()
    gc.callbacks.append(counting)
    try:
        cached = lint_paths([str(project)], LintConfig(root=project), opts)
    finally:
        gc.callbacks.remove(counting)
        if not was_enabled:
            gc.disable()
    assert hits[0] == n  # every file's facts came from the cache
    assert len(cached.findings) == len(cold.findings) == n * per_file  # one CL101 each
    assert passes == []
    assert frozen and frozen[0] > 0  # the facts were frozen before the collector resumed


def test_a_file_is_parsed_once_per_run(tmp_path, monkeypatch):
    """The per-rank evaluator reads the tree the extraction parsed (kept for the run, within a
    budget of source bytes) instead of parsing the file again; past the budget it parses."""
    import ast

    from commlint.lint import parsed_trees

    text = _block(4)
    (tmp_path / "a.py").write_text(text, encoding="utf-8")
    parses: list[int] = []
    real = ast.parse

    def counted(source, *a, **k):
        if source == text:
            parses.append(1)
        return real(source, *a, **k)

    monkeypatch.setattr(ast, "parse", counted)
    report = _lint(tmp_path, jobs=1)
    assert sum(f.code == "CL101" for f in report.findings) == 4
    assert parses == []
    assert parsed_trees.open_store() is None  # let go with the run

    monkeypatch.setattr(parsed_trees, "BUDGET", 10)
    report = _lint(tmp_path, jobs=1)
    assert sum(f.code == "CL101" for f in report.findings) == 4
    assert parses == [1]
