"""A followed module's top level runs once for every rank and file (`perrank_templates`), and
what every rank sees of it is what its own run would have given: the findings with sharing
are the findings without it."""

from __future__ import annotations

from pathlib import Path

from commlint.lint import perrank, perrank_calls
from commlint.lint.config import LintConfig
from commlint.lint.engine import LintOptions, lint_paths

COMMON = """\
import torch.distributed as dist

GROUP_NAME = None
REGISTRY = [1, 2]


class Config:
    steps = 2
    size = 4

    def __init__(self):
        self.scale = 1


def peer_of(rank, world):
    return (rank + 1) % world


def setup(name):
    global GROUP_NAME
    GROUP_NAME = name
    return GROUP_NAME


def current():
    return GROUP_NAME
"""

# every file: rank 0 reduces once more than the others when the module's global says so
MAIN = """\
import torch
import torch.distributed as dist

from common import Config, REGISTRY, current, peer_of, setup


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    setup("{name}")
    cfg = Config()
    t = torch.ones(cfg.size)
    {extra}
    for _ in range(cfg.steps):
        dist.all_reduce(t)
    if peer_of(rank, world) == 0:
        dist.barrier()
    if current() == "hang" and rank == 0:
        dist.all_reduce(t)
    dist.barrier()


if __name__ == "__main__":
    main()
"""

FILES = 6


def _project(root: Path) -> None:
    (root / "common.py").write_text(COMMON, encoding="utf-8")
    for k in range(FILES):
        name = "hang" if k % 2 else "fine"
        # one file writes into the shared module's list: it is evaluated without sharing
        extra = "REGISTRY.append(3)" if k == 3 else "pass"
        (root / f"train{k}.py").write_text(MAIN.format(name=name, extra=extra), encoding="utf-8")


def _findings(root: Path) -> list[tuple]:
    report = lint_paths([str(root)], LintConfig(root=root), LintOptions(cache=False, jobs=1))
    assert not report.errors
    return sorted((f.path, f.line, f.code, f.message) for f in report.findings)


def test_a_module_imported_by_many_files_runs_its_top_level_once(tmp_path, monkeypatch):
    _project(tmp_path)
    built: list[str] = []
    make_cls = perrank_calls.Calls.make_cls

    def counting(self, s, env):
        if s.name == "Config":
            built.append(type(self).__name__)
        return make_cls(self, s, env)

    monkeypatch.setattr(perrank_calls.Calls, "make_cls", counting)
    shared = _findings(tmp_path)
    # 6 files x (2 + 4 + 8) ranks imported `common`; its class was built once, and again by
    # the ranks of the one file that writes into the module (evaluated without sharing)
    evaluated_alone = 2 + 4 + 8
    assert len(built) <= 1 + evaluated_alone, built
    assert built.count("TemplateRank") == 1

    built.clear()
    monkeypatch.setattr(perrank, "templates_of", lambda index, table: None)
    alone = _findings(tmp_path)
    assert len(built) >= FILES * (2 + 4 + 8)
    # what sharing saves changes nothing (the module's global rebound by `setup` included)
    assert shared == alone
    assert {Path(p).name for p, *_ in shared} == {f"train{k}.py" for k in range(FILES)}
