"""`--format html`: the page's structure, from real traces through the CLI."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from commlint.cli import main
from commlint.findings import Finding, Location, Report
from commlint.graph.check import check_trace
from commlint.plans.io import loads_trace
from commlint.report import html as html_report

CROSS_GROUP = """\
version: 1
world_size: 2
groups: {tp: [0, 1], dp: [0, 1]}
ranks:
  0:
    - {op: all_reduce, site: "train.py:10"}
    - {op: all_reduce, group: tp, site: "train.py:41"}
    - {op: all_reduce, group: dp, site: "train.py:42"}
  1:
    - {op: all_reduce, site: "train.py:10"}
    - {op: all_reduce, group: dp, site: "train.py:42"}
    - {op: all_reduce, group: tp, site: "train.py:41"}
"""

MISMATCH = """\
version: 1
world_size: 3
ranks:
  0: [{op: all_reduce}, {op: all_reduce, site: "metrics.py:7"}, {op: barrier}]
  1: [{op: all_reduce}, {op: all_reduce, site: "metrics.py:7"}, {op: barrier}]
  2: [{op: all_reduce}, {op: barrier, site: "metrics.py:9"}]
"""


class Page(HTMLParser):
    """Elements as (tag, attrs) plus the text, enough to check the structure."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, cls: str | None = None, **attrs: str) -> list[dict[str, str]]:
        out = []
        for t, a in self.elements:
            if t != tag:
                continue
            if cls and cls not in a.get("class", "").split():
                continue
            if all(a.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(a)
        return out


def render_cli(tmp_path: Path, text: str, name: str = "plan.yaml") -> tuple[str, Page]:
    plan = tmp_path / name
    plan.write_text(text)
    out = tmp_path / "report.html"
    code = main(["plan", str(plan), "--format", "html", "-o", str(out)])
    assert code == 1
    page_text = out.read_text()
    return page_text, Page(page_text)


def test_cross_group_deadlock_page(tmp_path):
    text, page = render_cli(tmp_path, CROSS_GROUP)
    assert text.startswith("<!DOCTYPE html>")
    # self-contained: nothing fetched, nothing scripted
    assert "http" not in text
    assert not page.find("script") and not page.find("link") and not page.find("img")
    [finding] = page.find("div", "finding")
    assert finding["data-code"] == "CL201"
    # the cycle drawn: two ranks, two wait-for edges, each edge listed with its site
    assert len(page.find("circle", "node")) == 2
    assert len(page.find("path", "edge")) == 2
    joined = "".join(page.text)
    assert "waits in all_reduce(tp)" in joined and "@train.py:41" in joined
    # one grid per process group, a row per member
    assert [h["data-group"] for h in page.find("h3", "group")] == ["WORLD", "dp", "tp"]
    # the issue-order grid shows each rank's blocked collective, across groups
    blocked = {(c["data-rank"], c["data-action"]) for c in page.find("td", "blocked")}
    assert ("0", "1") in blocked and ("1", "1") in blocked
    # both ranks issue both collectives, so no group grid has a missing cell
    assert page.find("td", "miss") == []
    ops = {c["data-op"] for c in page.find("td", "c") if "data-op" in c}
    assert ops == {"all_reduce"}


def test_mismatch_column_is_marked(tmp_path):
    _, page = render_cli(tmp_path, MISMATCH)
    assert [f["data-code"] for f in page.find("div", "finding")] == ["CL203"]
    assert len(page.find("th", "mm")) == 1  # column 1 of WORLD: all_reduce vs barrier
    mm_cells = page.find("td", "mm")
    assert sorted(c["data-rank"] for c in mm_cells) == ["0", "1", "2"]
    # rank 2 never issues a third collective: its cell at sequence number 3 is missing
    assert [(c["data-rank"], c["data-missing"]) for c in page.find("td", "miss")] == [("2", "3")]
    hit_cells = {(c["data-rank"], c["data-op"]) for c in page.find("td", "hit")}
    assert ("2", "barrier") in hit_cells and ("0", "all_reduce") in hit_cells


def test_findings_only_page_without_traces():
    f = Finding(
        code="CL101",
        name="conditional-collective",
        severity="error",
        message="all_reduce only on rank 0 <hangs>",
        path="train.py",
        line=8,
        actions=[Location(path="train.py", line=8)],
        fix="Call it on every rank.",
    )
    text = html_report.render(Report(findings=[f], checked=1))
    page = Page(text)
    assert [d["data-code"] for d in page.find("div", "finding")] == ["CL101"]
    assert "&lt;hangs&gt;" in text and "<hangs>" not in text
    assert not page.find("table")


def test_large_traces_are_truncated_keeping_the_odd_rank():
    """100 ranks, rank 97 leaves before the third all-reduce: the 99 others wait for it.
    The grid shows 64 rows and rank 97 among them, with its missing cell."""
    ranks = {r: "[{op: all_reduce}, {op: all_reduce}, {op: all_reduce}]" for r in range(100)}
    ranks[97] = "[{op: all_reduce}, {op: all_reduce}]"
    trace = loads_trace(
        "version: 1\nworld_size: 100\nranks:\n"
        + "".join(f"  {r}: {acts}\n" for r, acts in ranks.items())
    )
    result = check_trace(trace, "gloo")
    assert [f.code for f in result.findings] == ["CL202"]
    report = Report(findings=result.findings, checked=1)
    page = Page(html_report.render(report, {"big.yaml": trace}))
    rows = {c["data-rank"] for c in page.find("td", "c") if c.get("data-action") == "0"}
    assert "97" in rows and len(rows) == html_report.MAX_ROWS
    assert [(c["data-rank"], c["data-missing"]) for c in page.find("td", "miss")] == [("97", "3")]
    assert any("showing 64 of 100 ranks" in t for t in page.text)


def test_sites_are_escaped(tmp_path):
    evil = CROSS_GROUP.replace("train.py:41", "<b>x</b>.py:41")
    text, page = render_cli(tmp_path, evil)  # titles are unescaped by the parser
    assert "<b>x</b>" not in text
    assert "&lt;b&gt;x&lt;/b&gt;.py:41" in text
    # …and read back as the very same text
    assert "@ <b>x</b>.py:41" in "".join(c["title"] for c in page.find("td", "hit"))


@pytest.mark.parametrize("fmt", ["html"])
def test_html_is_listed_as_a_format(fmt, capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert fmt in capsys.readouterr().out


def test_many_groups_show_the_named_ones_first():
    world = 40
    groups = {f"g{k:02d}": [2 * k, 2 * k + 1] for k in range(20)}
    ranks = {r: [{"op": "all_reduce", "group": f"g{r // 2:02d}"}] for r in range(world)}
    ranks[39] = [{"op": "barrier", "group": "g19"}]  # a mismatch in the last group
    lines = ["version: 1", f"world_size: {world}", "groups:"]
    lines += [f"  {g}: {m}" for g, m in groups.items()]
    lines += ["ranks:"] + [f"  {r}: {a}".replace("'", "") for r, a in ranks.items()]
    trace = loads_trace("\n".join(lines) + "\n")
    result = check_trace(trace, "gloo")
    for f in result.findings:
        f.path = "many.yaml"
    page = Page(html_report.render(Report(findings=result.findings), {"many.yaml": trace}))
    shown = [h["data-group"] for h in page.find("h3", "group")]
    assert len(shown) == html_report.MAX_GROUPS
    assert shown[0] == "g19"  # the group a finding names comes first
    assert any("20 groups: showing the 16" in t for t in page.text)


CLEAN = """\
version: 1
world_size: 2
ranks:
  0: [{op: all_reduce}]
  1: [{op: all_reduce}]
"""


def test_header_counts_inputs_with_findings_first_and_cards_say_where(tmp_path):
    """The header's plurals; the input with a finding above the clean one although it is
    named last; each finding card gives its file:line."""
    clean = tmp_path / "a_clean.yaml"
    clean.write_text(CLEAN)
    bad = tmp_path / "b_mismatch.yaml"
    bad.write_text(MISMATCH)
    out = tmp_path / "report.html"
    assert main(["plan", str(clean), str(bad), "--format", "html", "-o", str(out)]) == 1
    raw = out.read_text()
    page = Page(raw)
    text = [t.strip() for t in page.text if t.strip()]
    assert "1 finding (1 error, 0 warnings) in 2 checked" in text
    sections = [s["data-path"] for s in page.find("section", "input")]
    assert sections == [str(bad), str(clean)]
    where = text[text.index("CL203") :]
    assert any(t.startswith(f"{bad}:") and t.split(":")[-2].isdigit() for t in where[:6]), where
    # the group grid is numbered as Flight Recorder numbers collectives: the mismatch (rank 2's
    # barrier against the others' second all_reduce) is column 2, as CL203's message says
    group_grid = raw[raw.index('data-group="WORLD"') :]
    heads = re.findall(r"<th(?: [^>]*)?>(\d+)</th>", group_grid[: group_grid.index("</thead>")])
    assert heads == ["1", "2", "3"]
    assert re.search(r'<th class="mm"[^>]*>2</th>', group_grid)
    assert "collective #2 on group 'WORLD'" in html.unescape(raw)


def test_plurals_and_where_of_a_trace_finding():
    findings = [
        Finding(
            code="CL201",
            name="deadlock-cycle",
            severity="error",
            message="m",
            actions=[Location(rank=0, action=0, site="train.py:8")],
        ),
        Finding(code="CL206", name="x", severity="warning", message="w", path="p.yaml", line=3),
    ]
    page = Page(html_report.render(Report(findings=findings, checked=1)))
    text = [t.strip() for t in page.text if t.strip()]
    assert "2 findings (1 error, 1 warning) in 1 checked" in text
    assert "train.py:8" in text  # no file of its own: the call site of its first action
    assert "p.yaml:3" in text


def test_a_dry_run_page_has_the_rank_grids(tmp_path):
    """`commlint run --format html` draws the same rank × sequence grids as `commlint plan`:
    the dry-run's recorded trace is handed to the report (it was not: a page of findings
    without grids)."""
    pytest.importorskip("torch")
    program = Path(__file__).parents[1] / "dryrun" / "programs" / "bad_conditional_collective.py"
    out = tmp_path / "run.html"
    code = main(["run", "--nproc-per-node", "2", "--format", "html", "-o", str(out), str(program)])
    assert code == 1
    page = Page(out.read_text())
    assert [h["data-group"] for h in page.find("h3", "group")] == ["WORLD"]
    # one row per rank in the issue-order grid, and cells of the recorded collectives
    assert {c["data-rank"] for c in page.find("td", "c")} == {"0", "1"}
    assert "all_reduce" in {c.get("data-op") for c in page.find("td", "c")}
