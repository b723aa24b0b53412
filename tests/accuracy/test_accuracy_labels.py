"""Keep the accuracy benchmark honest: its labels, its labelling logic, its scoring.

The real-run test re-runs a small random sample of labelled programs with gloo (one launch of
2 ranks, well under 90 s) and requires the same label. Set ACCURACY_SAMPLE_SEED to replay a
sample; the seed in use is printed on failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

import pytest
from warm_python import python_command

from bench.accuracy import generate
from bench.accuracy.runner import disagreeing_checks, label_of
from bench.accuracy.score import POSITIVE, confusion, table

HERE = Path(generate.__file__).resolve().parent
PROGRAMS = json.loads((HERE / "programs.json").read_text())["programs"]
LABELS = json.loads((HERE / "labels.json").read_text())["labels"]


def _sha(prog: dict) -> str:
    return hashlib.sha256((HERE / prog["path"]).read_bytes()).hexdigest()[:16]


def test_enough_labelled_programs_of_every_kind():
    labelled = [p for p in PROGRAMS if p["id"] in LABELS]
    assert len(labelled) >= 500
    kinds = {LABELS[p["id"]]["label"] for p in labelled}
    assert {"ok", "hang", "fail"} <= kinds
    assert {p["world_size"] for p in labelled} == {2, 4, 6, 8}
    positives = sum(LABELS[p["id"]]["label"] in POSITIVE for p in labelled)
    assert 0.25 * len(labelled) < positives < 0.85 * len(labelled)


def test_labels_belong_to_the_stored_program_text():
    stale = [
        p["id"] for p in PROGRAMS if p["id"] in LABELS and LABELS[p["id"]].get("sha") != _sha(p)
    ]
    assert stale == [], f"relabel with `python -m bench.accuracy.label`: {stale[:5]}"


def test_generator_is_deterministic_and_matches_the_stored_programs():
    again = generate.generate(len(PROGRAMS), seed=7)
    for rec, stored in zip(again[:40], PROGRAMS[:40], strict=True):
        assert rec["id"] == stored["id"]
        assert rec["detail"] == stored["detail"]
        # The stored text is the generated text after `ruff format`: compare the code only.
        compile(rec["_text"], rec["id"], "exec")


def test_unmutated_and_harmless_programs_complete():
    wrong = [
        (p["id"], LABELS[p["id"]]["label"])
        for p in PROGRAMS
        if p["intent"] in ("none", "harmless")
        and p["id"] in LABELS
        and LABELS[p["id"]]["label"] != "ok"
    ]
    assert wrong == []


AR = ["all_reduce", [0, 1], [4], "float32", None]
AR64 = ["all_reduce", [0, 1], [4], "float64", None]
BC0 = ["broadcast", [0, 1], [4], "float32", 0]
BC1 = ["broadcast", [0, 1], [4], "float32", 1]


@pytest.mark.parametrize(
    ("statuses", "calls", "expected"),
    [
        (["ok", "ok"], [[AR, BC0], [AR, BC0]], "ok"),
        (["ok", "ok"], [[AR, BC0], [BC0, AR]], "corrupt"),  # reordered, paired silently
        (["ok", "ok"], [[AR], [AR64]], "corrupt"),
        (["ok", "ok"], [[BC0], [BC1]], "corrupt"),
        (["ok", "ok"], [[AR, AR], [AR]], "corrupt"),  # one extra call left unmatched
        (["ok", "timeout"], [[], []], "hang"),
        (["peer_closed", "timeout"], [[], []], "hang"),
        (["error", "timeout"], [[], []], "fail"),  # the error came first: the job fails
        (["died", "peer_closed"], [[], []], "fail"),
        (["ok", "stuck"], [[], []], "hang"),
    ],
)
def test_label_of_per_rank_results(statuses, calls, expected):
    ranks = [
        {"rank": r, "status": s, "calls": c}
        for r, (s, c) in enumerate(zip(statuses, calls, strict=True))
    ]
    assert label_of(ranks)[0] == expected


def test_groups_are_compared_only_among_their_members():
    solo = ["all_reduce", [1], [4], "float64", None]  # a one-member group: nobody to differ
    ranks = [
        {"rank": 0, "status": "ok", "calls": [AR]},
        {"rank": 1, "status": "ok", "calls": [AR, solo]},
    ]
    assert label_of(ranks)[0] == "ok"


def test_replicas_that_disagree_with_matching_calls_are_a_data_bug():
    ranks = [
        {"rank": 0, "status": "ok", "calls": [AR], "checks": [["w", 1.0]]},
        {"rank": 1, "status": "ok", "calls": [AR], "checks": [["w", 2.0]]},
    ]
    assert label_of(ranks)[0] == "ok"
    assert disagreeing_checks(ranks) == ["w"]


def test_confusion_and_table_rows():
    rows = [(True, True), (True, False), (False, True), (False, False), (False, False)]
    assert confusion(rows) == {"n": 5, "tp": 1, "tn": 2, "fp": 1, "fn": 1}
    text = "\n".join(table("family", {"mlp": rows, "none": []}))
    assert "| Precision | 50.0% | — |" in text
    assert "| Recall | 50.0% | — |" in text


@pytest.mark.real
def test_a_random_sample_of_labels_holds_when_rerun():
    from bench.accuracy.label import needs_own_launch
    from bench.accuracy.runner import run_batch

    seed = int(os.environ.get("ACCURACY_SAMPLE_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    pool = [
        p
        for p in PROGRAMS
        if p["world_size"] == 2 and p["id"] in LABELS and not needs_own_launch(p)
    ]
    by_label: dict[str, list[dict]] = {}
    for p in pool:
        by_label.setdefault(LABELS[p["id"]]["label"], []).append(p)
    # One launch of 2 ranks (about 8 s), plus one timeout per hang and a relaunch per gloo
    # abort: 3 ok, 1 hang, 1 fail, 1 corrupt stay well under 90 s on 2 cores.
    want = {"ok": 3, "hang": 1, "fail": 1, "corrupt": 1}
    sample = []
    for label, n in want.items():
        progs = by_label.get(label, [])
        sample += rng.sample(progs, min(n, len(progs)))
    rng.shuffle(sample)
    # Failures last: a gloo abort ends the launch and costs a relaunch.
    sample.sort(key=lambda p: LABELS[p["id"]]["label"] == "fail")
    # A longer timeout than labelling used: a loaded machine must not turn a slow step into
    # a hang (a real hang still hangs).
    timeout = 1.5 * LABELS[sample[0]["id"]]["timeout"]
    print(f"ACCURACY_SAMPLE_SEED={seed}:", [p["id"] for p in sample])
    python = python_command()  # the ranks forked warm (tests/warm_python.py)
    paths = [str(HERE / p["path"]) for p in sample]
    outcomes = run_batch(paths, 2, timeout, log=print, python=python)
    # A mismatch that aborts one rank in gloo may instead leave both waiting, depending on
    # which side reads first: hang and fail are one verdict (the job does not finish).
    verdict = {"ok": "ok", "corrupt": "corrupt", "hang": "stops", "fail": "stops"}
    got = {p["id"]: verdict[o.label] for p, o in zip(sample, outcomes, strict=True)}
    stored = {p["id"]: verdict[LABELS[p["id"]]["label"]] for p in sample}
    # A loaded machine can hold a correct program's first step past the timeout (a rank still
    # importing): re-run each such one alone with 4x the timeout. A real hang still hangs.
    for p in sample:
        if stored[p["id"]] == "ok" != got[p["id"]]:
            (again,) = run_batch([str(HERE / p["path"])], 2, 4 * timeout, log=print, python=python)
            got[p["id"]] = verdict[again.label]
    assert got == stored, f"ACCURACY_SAMPLE_SEED={seed}"


ALL_FAMILIES = (
    *generate.FAMILIES,
    *generate.EXTRA_FAMILIES,
    *generate.FRAMEWORK_FAMILIES,
    *generate.TRAINER_FAMILIES,
    *generate.TITAN_FAMILIES,
)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_every_mutation_of_every_family_renders_a_program_that_compiles(family):
    """Every (class, site, harmless) a family supports, at every world size, gives a program
    Python accepts: in the trainers' families the step is a method, so a rank that leaves
    early returns instead of `break` (outside a loop, a syntax error)."""
    rng = random.Random(3)
    for world in generate.WORLD_SIZES:
        if family == "hier" and world == 2:
            continue
        fam = generate.build_family(family, world, rng)
        for cls, site, harmless in generate.applicable(fam, world):
            pre, body, m = generate.mutate(fam, world, cls, site, harmless, rng)
            text = generate.render_program("p", fam, world, pre, body, m)
            compile(text, f"{family}/{cls}/{site}/{harmless}", "exec")


@pytest.mark.real
@pytest.mark.parametrize("family", [*generate.TRAINER_FAMILIES, *generate.TITAN_FAMILIES])
def test_framework_programs_hold_their_labels_when_rerun(family):
    """The first 2-rank program of each outcome of a framework family, re-run alone (as they
    were labelled), keeps its label: the trainers really train under gloo, and a mutation
    really stops them. The default group's timeout is short: a trainer's hang waits for it."""
    from bench.accuracy.runner import run_batch

    picked: dict[str, dict] = {}
    for p in sorted(PROGRAMS, key=lambda p: p["id"]):
        if p["family"] == family and p["world_size"] == 2 and p["id"] in LABELS:
            stops = LABELS[p["id"]]["label"] in ("hang", "fail")
            picked.setdefault("stops" if stops else LABELS[p["id"]]["label"], p)
    assert "ok" in picked
    python = python_command()  # the ranks forked warm (tests/warm_python.py)
    for verdict, p in sorted(picked.items()):
        (outcome,) = run_batch(
            [str(HERE / p["path"])], 2, 10.0, log=print, group_timeout=15.0, python=python
        )
        got = "stops" if outcome.label in ("hang", "fail") else outcome.label
        assert got == verdict, (p["id"], outcome.to_json())


def test_the_fake_tensor_section_counts_the_runs_that_needed_real_compute():
    from bench.accuracy.score import _fake_tensor_section

    progs = [{"id": "a", "family": "lightning"}, {"id": "b", "family": "lightning"}]
    progs.append({"id": "c", "family": "mlp"})
    lab = {"a": "hang", "b": "ok", "c": "ok"}
    res = {
        "a": {"flagged": True, "real_compute": False},
        "b": {"flagged": False, "real_compute": True},
        "c": {"flagged": True, "real_compute": False},
    }
    text = "\n".join(_fake_tensor_section(progs, lab, res))
    assert "| family | lightning | mlp | all |" in text
    assert "| False positive | 0 | 1 | 1 |" in text
    assert "| Needed real compute | 1 | 0 | 1 |" in text
    assert _fake_tensor_section(progs, lab, {}) == []
