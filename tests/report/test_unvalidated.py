"""`findings.unvalidated`: the analyses' findings built without validation are the same models
as validated ones, defaults included, and never share a mutable default."""

from commlint.findings import Finding, Location, unvalidated


def test_same_as_validated_with_defaults_filled():
    kw = dict(code="CL101", severity="error", message="m", path="a.py", line=3, col=1)
    rel = dict(path="a.py", line=2, col=4, message="cond")
    built = unvalidated(Finding, **kw, related=[unvalidated(Location, **rel)])
    checked = Finding(**kw, related=[Location(**rel)])
    assert built.model_dump(mode="json") == checked.model_dump(mode="json")
    assert built.ranks == [] and built.cycle is None and built.name == ""


def test_default_lists_are_not_shared():
    a = unvalidated(Finding, code="CL101", severity="error", message="m")
    b = unvalidated(Finding, code="CL101", severity="error", message="m")
    a.ranks.append(1)
    a.actions.append(Location(rank=1))
    assert b.ranks == [] and b.actions == []
