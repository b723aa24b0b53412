"""`float(t)` / `int(t)` of a fake tensor: the dry-run gives a placeholder only where the
program's bytecode shows the number never steers it (`commlint/plans/dryrun/flow.py`).

Each case below is a small function calling `float()` / `int()` on a probe whose conversion
asks the analysis, exactly as the dry-run's `Tensor.__float__` does; the test reads what
it answered for each line marked `# ok` or `# steers`."""

from __future__ import annotations

import dis
import logging
import math
import re
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from commlint.plans.dryrun.flow import only_computed_with
from commlint.plans.dryrun.flow import tested_at_once as at_once

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="3.11 bytecode")

answered: dict[int, bool] = {}
log = logging.getLogger("float-flow")


class Probe:
    """Answers like a fake tensor's conversion: 1.0 / 1, noting whether the analysis said
    the number is only computed with (keyed by the caller's line)."""

    def __float__(self) -> float:
        caller = sys._getframe(1)
        answered[caller.f_lineno] = only_computed_with(caller)
        return 1.0

    def __int__(self) -> int:
        caller = sys._getframe(1)
        answered[caller.f_lineno] = only_computed_with(caller, integer=True)
        return 1


def helper_scale(value: float, factor: float) -> float:
    return value * factor


def helper_test(value: float) -> bool:
    return value > 3


def wrapped(t: Probe) -> float:
    return float(t) * 2  # ok (its caller only prints it)


def read_back(t: Probe) -> float:
    return float(t)  # steers (its caller tests it)


def program(t: Probe, weight: torch.Tensor) -> list:
    history = []
    metrics = {}
    weight.sub_(0.01 * float(t) / 2)  # ok: an operation on a fake tensor
    print(f"loss {float(t):.3f}")  # ok
    log.info("loss %s", float(t))  # ok
    history.append(float(t))  # ok: a list this function built
    metrics["loss"] = helper_scale(float(t), 2.0)  # ok: the helper only computes
    root = math.sqrt(float(t))  # ok
    print(root, wrapped(t), history)
    if float(t) > 1:  # steers
        pass
    if helper_test(float(t)):  # steers: the helper tests it
        pass
    for _ in range(int(t)):  # steers: a loop bound
        pass
    weight.view(int(t), -1)  # steers: an integer given to a tensor is a size
    table = [1, 2, 3]
    table[int(t)] = 0  # steers: an index
    if read_back(t) == 0:
        pass
    kept.append(float(t))  # steers: a list that outlives the function
    total = torch.tensor([float(t) ** 2])  # ok: a tensor's data (it then knows no value)
    torch.full((2,), float(t))  # ok: the fill value
    weight.new_tensor([float(t)])  # ok
    torch.full((int(t),), 0.0)  # steers: a size
    torch.tensor([1.0], dtype=torch.float64 if float(t) else None)  # steers: an option
    print(total)
    norm = float(t) ** 2  # ok: the name holds a new value before it is tested
    norm = len(table)
    if norm > 2:
        pass
    again = float(t)  # steers: on one path the test reads it
    if table:
        again = 0.0
    if again > 1:
        pass
    return [("w", float(t)), metrics]  # ok: the caller prints it


kept: list = []


def expected() -> dict[int, bool]:
    lines = Path(__file__).read_text().splitlines()
    marks = {}
    for number, text in enumerate(lines, 1):
        found = re.search(r"\S  # (ok|steers)\b", text)
        if found:
            marks[number] = found.group(1) == "ok"
    return marks


def test_each_use_of_a_converted_number_is_told_apart():
    with FakeTensorMode():
        weight = torch.zeros(3)
    answered.clear()
    print(program(Probe(), weight))
    assert answered == expected()


def test_a_placeholder_made_a_tensors_data_is_pending_at_that_call():
    # `torch.tensor([float(norm)])`: the call that makes the tensor is told (flow.PENDING,
    # with whether the number is the same on every rank), so the tensor knows no value
    from commlint.plans.dryrun import flow

    def norm_of(t: Probe) -> torch.Tensor:
        total = 0.0
        for _ in range(2):
            total += float(t) ** 2
        return torch.tensor([total])

    flow.PENDING.clear()
    code = norm_of.__code__
    calls = [i.offset for i in dis.get_instructions(code) if i.opname == "CALL"]

    class Uniform(Probe):
        def __float__(self) -> float:
            only_computed_with(sys._getframe(1), placeholder_uniform=True)
            return 1.0

    class Local(Probe):
        def __float__(self) -> float:
            only_computed_with(sys._getframe(1), placeholder_uniform=False)
            return 1.0

    norm_of(Uniform())
    assert {(code, calls[-1]): True} == flow.PENDING
    flow.PENDING.clear()
    norm_of(Local())
    assert {(code, calls[-1]): False} == flow.PENDING
    flow.PENDING.clear()


@pytest.mark.parametrize(
    ("source", "ok"),
    [
        # a script's top level: its names are globals, but nothing else reads these
        ("total = 0.0\nfor _ in range(2):\n    total += float(probe) ** 2\n"
         "norm = torch.tensor([total])\nprint(total)\n", True),
        ("total = float(probe)\nif total > 1:\n    pass\n", False),
        # a function defined there reads the name: it may test it
        ("total = float(probe)\ndef later():\n    return total > 1\n", False),
        ("total = float(probe)\nseen = [x for x in [total] if x]\n", False),
        ("total = float(probe)\nprint(globals()['total'])\n", False),
    ],
)  # fmt: skip
def test_a_scripts_top_level_names_are_followed_when_only_it_reads_them(source, ok):
    said: list[bool] = []

    class TopLevel(Probe):
        def __float__(self) -> float:
            said.append(only_computed_with(sys._getframe(1)))
            return 1.0

    code = compile(source, "script.py", "exec")
    exec(code, {"probe": TopLevel(), "torch": torch, "__name__": "__main__"})
    assert said == [ok] * len(said) and said


def test_a_number_returned_into_c_code_is_never_trusted():
    """`map` calls the function from C: who receives the value is unknown."""
    answered.clear()
    results = list(map(wrapped, [Probe()]))
    assert results == [2.0]
    assert set(answered.values()) == {False}


def test_real_tensors_never_take_a_placeholder():
    """A real tensor keeps the number: later reads of it would see the placeholder."""
    real = torch.zeros(3)

    def uses(t: Probe) -> None:
        real.add_(float(t))

    answered.clear()
    uses(Probe())
    assert list(answered.values()) == [False]


class Tested:
    """Notes what `tested_at_once` finds for the caller's line."""

    found: ClassVar[dict[int, object]] = {}

    def __float__(self) -> float:
        caller = sys._getframe(1)
        Tested.found[caller.f_lineno] = at_once(caller)
        return 1.0


# compiled apart: pytest rewrites the `assert` statements of a test module
CHECKS = """
def checks_of(t, limit):
    if float(t) > limit:
        pass
    if 0.5 <= float(t):
        pass
    while float(t):
        break
    assert float(t) < 10
    value = float(t)
    if value > 1:  # not at once: the value is kept
        pass
"""


def test_a_number_tested_at_once_is_found_with_its_comparison():
    space: dict = {}
    exec(compile(CHECKS, "checks.py", "exec"), space)
    Tested.found.clear()
    space["checks_of"](Tested(), 3.0)
    first = 2
    assert Tested.found == {
        first + 1: ("gt", 3.0, True, None),
        first + 3: ("le", 0.5, False, None),
        first + 5: (None, None, True, None),
        first + 7: ("lt", 10, True, True),
        first + 8: None,
    }
