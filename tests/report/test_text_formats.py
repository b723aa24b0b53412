"""concise, full, github and --statistics output, from hand-made findings."""

from __future__ import annotations

import io
import re

from report_samples import make_report, render

from commlint.findings import Finding, Location
from commlint.report.github import escape_data, escape_property
from commlint.report.statistics import statistics, write_statistics

# -- concise ---------------------------------------------------------------------------------


def test_concise_is_one_line_per_finding(every_shape):
    lines = render(every_shape, "concise").splitlines()
    assert lines[0] == (
        "train.py:8:9: CL101 all_reduce runs only on rank 0; ranks 1.. never call it, "
        "rank 0 waits forever."
    )
    assert lines[1].startswith("<trace>: CL201 rank 0 waits in send(→1)")
    # A multi-line message is folded so that the format stays one line per finding.
    assert lines[2].startswith("plans/odd, name:1.yaml: CL206 The handle of isend")
    assert lines[2].endswith("lost. Second line.")
    assert re.match(r"^/.*elsewhere\.py:3: CL199 ", lines[3])
    assert len(lines) == 5 and lines[4].startswith("Found 4 findings")


def test_concise_clean_report_says_so():
    report = make_report()
    report.checked = 3
    assert render(report, "concise") == "All checks passed (3 checked).\n"


def test_nothing_checked_is_never_a_pass():
    assert render(make_report(), "concise") == "Nothing was checked.\n"


# -- full ------------------------------------------------------------------------------------


def test_full_marks_the_call_and_the_condition(project, conditional):
    out = render(make_report(conditional), "full")
    lines = out.splitlines()
    assert lines[0].startswith("train.py:8:9: CL101 [error] all_reduce runs only on rank 0")
    call = lines.index("8 |         dist.all_reduce(loss)")
    # the caret sits exactly under `dist.all_reduce(loss)` (columns 9..29)
    assert lines[call + 1] == "  |         " + "^" * 21 + " CL101 conditional-collective"
    cond = lines.index("6 |     if rank == 0:")
    assert lines[cond + 1] == "  |        --------- depends on rank"
    assert cond < call
    # the line between them is context, shown once; lines far away are not
    assert lines.count("7 |         log(loss)") == 1
    assert "1 | import torch.distributed as dist" not in lines
    # a related location in another file gets its own excerpt
    other = lines.index("  ::: helpers.py:2:12")
    assert lines[other + 3] == "2 |     return dist.get_rank() == 0"
    assert (
        lines[other + 4]
        == "  |            " + "-" * len("dist.get_rank() == 0") + " rank helper defined here"
    )
    assert "  = help: Move the all_reduce out of the `if rank == 0:` branch." in lines


def test_full_draws_the_cycle_of_a_trace_finding(cycle):
    out = render(make_report(cycle), "full")
    assert out.splitlines()[0] == (
        "<trace>: CL201 [error] rank 0 waits in send(→1) for rank 1, which waits in send(→0) "
        "for rank 0."
    )
    assert (
        "  = cycle: rank 0 ─send(→1) @train.py:8─▶ rank 1 ─send(→0) @train.py:13─▶ rank 0"
        in out.splitlines()
    )
    assert "  = model: gloo" in out
    assert " | " not in out  # no source, no excerpt


def test_full_without_readable_source_falls_back_to_notes(tmp_path, monkeypatch, conditional):
    monkeypatch.chdir(tmp_path)  # train.py and helpers.py do not exist here
    lines = render(make_report(conditional), "full").splitlines()
    assert "  = note: train.py:6:8: depends on rank" in lines
    assert "  = note: helpers.py:2:12: rank helper defined here" in lines
    assert not any(" | " in line for line in lines)


def test_full_elides_far_apart_lines_and_handles_tabs_and_wide_chars(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = ["x = 0"] * 30
    body[1] = "if rank == 0:"
    body[24] = "\tname = '名前'; dist.barrier()"
    (tmp_path / "far.py").write_text("\n".join(body) + "\n", encoding="utf-8")
    col = body[24].index("dist") + 1
    finding = Finding(
        code="CL101",
        name="conditional-collective",
        severity="error",
        message="barrier only on rank 0.",
        path="far.py",
        line=25,
        col=col,
        end_line=25,
        end_col=col + len("dist.barrier()"),
        related=[Location(path="far.py", line=2, col=4, end_line=2, end_col=13, message="cond")],
    )
    lines = render(make_report(finding), "full").splitlines()
    assert "..." in lines  # lines 4..23 are not shown
    assert not any(line.startswith("10 |") for line in lines)
    shown = lines.index("25 |     name = '名前'; dist.barrier()")
    marker = lines[shown + 1]
    # the tab is shown as four columns and each wide character takes two
    assert marker.index("^") == shown_line_index(lines[shown], "dist")
    assert marker.count("^") == len("dist.barrier()")


def shown_line_index(line: str, text: str) -> int:
    prefix = line[: line.index(text)]
    return sum(2 if ch in "名前" else 1 for ch in prefix)


# -- github ----------------------------------------------------------------------------------

COMMAND = re.compile(r"^::(error|warning)(?: (?P<props>[^:]*))?::(?P<message>.*)$")


def unescape(text: str) -> str:
    return (
        text.replace("%0D", "\r")
        .replace("%0A", "\n")
        .replace("%3A", ":")
        .replace("%2C", ",")
        .replace("%25", "%")
    )


def parse(line: str) -> tuple[str, dict[str, str], str]:
    match = COMMAND.match(line)
    assert match, line
    props = {}
    for item in (match["props"] or "").split(","):
        if item:
            key, _, value = item.partition("=")
            props[key] = unescape(value)
    return match[1], props, unescape(match["message"])


def test_github_escaping_follows_the_toolkit():
    assert escape_data("100%\r\n: ,") == "100%25%0D%0A: ,"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    # `%` first: an already escaped-looking text must survive a round trip
    assert unescape(escape_property("%3A")) == "%3A"


def test_github_annotations(every_shape):
    lines = render(every_shape, "github").splitlines()
    assert len(lines) == 5  # one input error + four findings, one line each
    kind, props, message = parse(lines[0])
    assert (kind, props["file"], props["line"], props["col"]) == ("error", "broken.py", "4", "2")
    assert message == "invalid syntax"

    kind, props, message = parse(lines[1])
    assert kind == "error"
    assert props == {
        "file": "train.py",
        "line": "8",
        "col": "9",
        "endLine": "8",
        "endColumn": "30",
        "title": "commlint CL101 (conditional-collective)",
    }
    assert lines[1].startswith("::error file=train.py,line=8,col=9,endLine=8,endColumn=30,title=")
    assert message.splitlines()[0].startswith("all_reduce runs only on rank 0")
    assert "note: train.py:6: depends on rank" in message.splitlines()
    assert message.splitlines()[-1] == "fix: Move the all_reduce out of the `if rank == 0:` branch."

    # a trace finding without a file: shown on the call site of its first action, with the
    # columns of the code on that line
    kind, props, message = parse(lines[2])
    assert (props["file"], props["line"], props["col"], props["endColumn"]) == (
        "train.py",
        "8",
        "9",
        "30",
    )
    assert props["title"] == "commlint CL201 (deadlock-cycle)"

    kind, props, message = parse(lines[3])
    assert kind == "warning"
    assert props["file"] == "plans/odd, name:1.yaml" and "line" not in props
    assert "%2C" in lines[3] and "%3A" in lines[3]  # `,` and `:` escaped in the file property
    assert message.startswith("The handle of isend is never waited: 50% of runs, a, b: lost.")
    assert "\nSecond line.\r" in message


def test_github_finding_that_names_nothing_has_only_a_title(cycle):
    cycle.actions = []
    cycle.cycle = None
    [line] = render(make_report(cycle), "github").splitlines()
    assert line.startswith("::error title=commlint CL201 (deadlock-cycle)::")


def test_github_leaves_out_columns_of_a_multi_line_finding(conditional):
    conditional.end_line = 10
    _, props, _ = parse(render(make_report(conditional), "github").splitlines()[0])
    assert props["line"] == "8" and props["endLine"] == "10"
    assert "col" not in props and "endColumn" not in props


# -- statistics ------------------------------------------------------------------------------


def test_statistics_counts_per_code_most_frequent_first(conditional, cycle, pathonly):
    report = make_report(cycle, conditional, pathonly, conditional, pathonly, conditional)
    rows = statistics(report)
    assert [(r["code"], r["count"]) for r in rows] == [("CL101", 3), ("CL206", 2), ("CL201", 1)]
    out = io.StringIO()
    write_statistics(report, out)
    first = out.getvalue().splitlines()[0].split("\t")
    assert [c.strip() for c in first] == ["3", "CL101", "[error]", "conditional-collective"]
    out = io.StringIO()
    write_statistics(make_report(), out)
    assert out.getvalue() == ""
