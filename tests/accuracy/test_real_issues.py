"""Keep the real-issue reproductions honest: manifest, programs, labels, labeller, scoring.

The real-run test re-runs a small sample (one hang, one ok twin, one fail) with torchrun and
gloo, one launch each, and requires the stored label.
"""

from __future__ import annotations

import json
import re

import pytest
from warm_python import python_command

from bench.accuracy import real_label, real_score
from bench.accuracy.real_label import REAL, label_of, load_labels, load_manifest, program_sha

MANIFEST = load_manifest()
LABELS = load_labels()
BY_NAME = {e["name"]: e for e in MANIFEST}
URL = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$")


def test_manifest_entries_are_complete_and_unique():
    assert len(MANIFEST) >= 100
    assert len(BY_NAME) == len(MANIFEST), "duplicate names"
    for e in MANIFEST:
        assert set(e) >= {"name", "url", "project", "nproc", "label", "static_visible", "why"}, e
        assert URL.match(e["url"]), f"{e['name']}: not a GitHub issue/PR url: {e['url']}"
        assert e["label"] in ("ok", "hang", "fail"), e["name"]
        assert isinstance(e["static_visible"], bool), e["name"]
        assert e["nproc"] in (2, 3, 4), e["name"]
        assert e["why"].strip(), e["name"]
        if "twin" in e:
            twin = BY_NAME.get(e["twin"])
            assert twin is not None, f"{e['name']}: twin {e['twin']} is not in the manifest"
            assert twin["label"] == "ok" and e["label"] != "ok", e["name"]
            assert twin["url"].split("/")[4] == e["url"].split("/")[4], "twin of another project"


def test_every_program_exists_compiles_and_cites_its_report():
    files = {p.stem for p in REAL.glob("*.py")}
    assert files == set(BY_NAME), (
        f"programs without entry / entries without program: {files ^ set(BY_NAME)}"
    )
    for e in MANIFEST:
        text = (REAL / f"{e['name']}.py").read_text()
        compile(text, e["name"], "exec")
        head = "\n".join(text.splitlines()[:3])
        assert head.startswith("# Reduced from https://github.com/"), e["name"]
        cited = re.findall(r"https://github\.com/[\w./-]+/\d+", head)
        assert any(c.split("/")[3:5] == e["url"].split("/")[3:5] for c in cited), e["name"]
        assert 'init_process_group("gloo"' in text and "CASE_TIMEOUT_S" in text, e["name"]


def test_labels_come_from_runs_of_the_current_programs_and_match_the_manifest():
    for e in MANIFEST:
        lab = LABELS.get(e["name"])
        assert lab is not None, f"{e['name']}: not labelled (python -m bench.accuracy.real_label)"
        assert lab["sha"] == program_sha(REAL / f"{e['name']}.py"), f"{e['name']}: relabel"
        assert lab["label"] == e["label"], f"{e['name']}: runs say {lab['label']}"
        assert len(set(lab["runs"])) == 1, f"{e['name']}: unstable {lab['runs']}"
        if lab["label"] == "hang":
            assert len(lab["runs"]) == 2, f"{e['name']}: a hang is confirmed by a second run"


def test_both_kinds_are_present_and_most_bugs_have_twins():
    bugs = [e for e in MANIFEST if e["label"] != "ok"]
    oks = [e for e in MANIFEST if e["label"] == "ok"]
    assert len(bugs) >= 40 and len(oks) >= 40
    assert {e["label"] for e in bugs} == {"hang", "fail"}
    assert sum("twin" in e for e in bugs) >= 0.8 * len(bugs)


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [
        ([{"status": "ok"}, {"status": "ok"}], "ok"),
        ([{"status": "ok"}, {"status": "timeout"}], "hang"),
        ([{"status": "peer_closed"}, {"status": "ok"}], "hang"),
        ([{"status": "stuck"}, {"status": "timeout"}], "hang"),
        ([{"status": "error"}, {"status": "timeout"}], "fail"),
        ([{"status": "ok"}, {"status": "died"}], "fail"),
    ],
)
def test_label_is_decided_by_what_the_ranks_did(ranks, expected):
    assert label_of(ranks) == expected


def test_hand_written_causes_name_programs_of_the_manifest():
    causes = real_score.load_causes()
    named = set(causes.get("causes", {})) | set(causes.get("flagged_for_another_reason", {}))
    assert named and named <= set(BY_NAME), named - set(BY_NAME)


def test_score_confusion_and_doc_splice():
    c = real_score.confusion([(True, True), (True, False), (False, True), (False, False)])
    assert (c["tp"], c["fn"], c["fp"], c["tn"]) == (1, 1, 1, 1)
    assert c["precision"] == "50%" and c["recall"] == "50%"
    doc = "# Accuracy\n\nbody\n"
    once = real_score.splice(doc, f"{real_score.START}\nA\n{real_score.END}\n")
    twice = real_score.splice(once, f"{real_score.START}\nB\n{real_score.END}\n")
    assert twice.count(real_score.START) == 1 and "\nB\n" in twice and "\nA\n" not in twice
    assert twice.startswith(doc.rstrip("\n"))


def test_stored_scores_belong_to_current_programs():
    path = real_score.results_path("check")
    if not path.exists():
        pytest.skip("no stored scores")
    results = json.loads(path.read_text())["results"]
    stale = [
        n for n, r in results.items() if n in BY_NAME and r["sha"] != program_sha(REAL / f"{n}.py")
    ]
    assert stale == [], f"rescore with `python -m bench.accuracy.real_score`: {stale}"


@pytest.mark.real
@pytest.mark.parametrize(
    "name",
    [
        "accelerate_2733_gather_object_main",
        "accelerate_2733_gather_object_main_fixed",
        "lightning_7773_all_gather_uneven",
    ],
)
def test_a_sample_keeps_its_label_when_run_again(name):
    e = BY_NAME[name]
    got = real_label.run_once(REAL / f"{name}.py", e["nproc"], python=python_command())
    if got["label"] == "unknown":  # too slow to start a rank (a loaded machine): as the labeller,
        # run it again, with a longer outer limit; it says nothing about the program
        outer = 2 * real_label.OUTER_TIMEOUT_S
        got = real_label.run_once(
            REAL / f"{name}.py", e["nproc"], outer=outer, python=python_command()
        )
    assert got["label"] == e["label"], got["ranks"]
