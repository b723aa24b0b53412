"""Rank conditions compared with group membership (literal ranks, residue classes), groups
kept from a creation loop, and reads of a rank's tensor values as data sources."""

from __future__ import annotations

import pytest

from tests.lint.helpers import lint_source

HEAD = "import torch\nimport torch.distributed as dist\n\n\n"


def codes(src: str, tmp_path) -> list[str]:
    return [f.code for f in lint_source(src, tmp_path).findings]


# --------------------------------------------------------------------------- membership

LEADERS = {
    "range-step": "list(range(0, world_size, 2))",
    "range-step-bare": "range(0, world_size, 2)",
    "comprehension": "[r for r in range(world_size) if r % 2 == 0]",
    "literal": "[0, 2]",
}
CONDS = {
    "inline": ("", "rank % 2 == 0"),
    "named": ("    is_leader = rank % 2 == 0\n", "is_leader"),
    "stage": ("    stage = rank % 2\n", "stage == 0"),
    "reversed": ("", "0 == rank % 2"),
    "negated-odd": ("", "not rank % 2"),
}


@pytest.mark.parametrize("members", sorted(LEADERS))
@pytest.mark.parametrize("cond", sorted(CONDS))
def test_condition_selecting_exactly_the_members_is_not_conditional(members, cond, tmp_path):
    setup, test = CONDS[cond]
    src = (
        HEAD + "def f(t, rank, world_size):\n"
        f"    leaders = dist.new_group({LEADERS[members]})\n{setup}"
        f"    if {test}:\n        dist.all_reduce(t, group=leaders)\n"
    )
    assert codes(src, tmp_path) == [], src


@pytest.mark.parametrize("members", sorted(LEADERS))
def test_condition_splitting_the_members_is_still_reported(members, tmp_path):
    # rank % 4 == 0 holds on rank 0 but not on rank 2, both members of the even ranks
    src = (
        HEAD + "def f(t, rank, world_size):\n"
        f"    leaders = dist.new_group({LEADERS[members]})\n"
        "    if rank % 4 == 0:\n        dist.all_reduce(t, group=leaders)\n"
    )
    assert codes(src, tmp_path) == ["CL101"], src


def test_odd_ranks_skip_a_collective_of_the_odd_ranks_is_reported(tmp_path):
    src = (
        HEAD + "def f(t, rank, world_size):\n"
        "    odd = dist.new_group(list(range(1, world_size, 2)))\n"
        "    if rank % 2 == 0:\n        dist.all_reduce(t, group=odd)\n"
        "    else:\n        dist.barrier(group=odd)\n"
    )
    # the odd ranks (every member) all take the else arm: nothing diverges on `odd`
    assert codes(src, tmp_path) == [], src


def test_literal_rank_outside_the_members_is_not_conditional(tmp_path):
    src = (
        HEAD + "def f(t, rank):\n    g = dist.new_group([1, 2, 3])\n"
        "    if rank == 0:\n        dist.barrier()\n    else:\n"
        "        dist.all_reduce(t, group=g)\n        dist.barrier()\n"
    )
    assert codes(src, tmp_path) == [], src


def test_members_with_a_different_stride_are_split(tmp_path):
    src = (
        HEAD + "def f(t, rank, world_size):\n"
        "    g = dist.new_group(list(range(0, world_size, 3)))\n"
        "    if rank % 2 == 0:\n        dist.all_reduce(t, group=g)\n"
    )
    assert codes(src, tmp_path) == ["CL101"], src


LOOP_GROUPS = (
    HEAD + "def f(t, rank, world_size):\n    tp_group = dp_group = None\n"
    "    for start in range(0, world_size, 2):\n        ranks = list(range(start, start + 2))\n"
    "        group = dist.new_group(ranks)\n        if rank in ranks:\n"
    "            tp_group = group\n"
    "    for first in range(2):\n        ranks = list(range(first, world_size, 2))\n"
    "        group = dist.new_group(ranks)\n        if rank in ranks:\n"
    "            dp_group = group\n"
    "{body}"
)


def test_groups_kept_from_a_creation_loop_have_their_own_identity(tmp_path):
    body = (
        "    if rank == 1:\n        dist.all_reduce(t, group=dp_group)\n"
        "    else:\n        dist.all_reduce(t, group=tp_group)\n"
    )
    found = lint_source(LOOP_GROUPS.format(body=body), tmp_path).findings
    assert [f.code for f in found] == ["CL101", "CL101"]
    assert {"dp_group", "tp_group"} == {f.message.split("group `")[1].split("`")[0] for f in found}


def test_parity_condition_on_a_strided_loop_group_is_not_conditional(tmp_path):
    body = "    if rank % 2 == 0:\n        dist.all_reduce(t, group=dp_group)\n"
    assert codes(LOOP_GROUPS.format(body=body), tmp_path) == []


def test_parity_condition_on_a_contiguous_loop_group_is_reported(tmp_path):
    body = "    if rank % 2 == 0:\n        dist.all_reduce(t, group=tp_group)\n"
    assert codes(LOOP_GROUPS.format(body=body), tmp_path) == ["CL101"]


# ------------------------------------------------------------------------------ tensors

READS = {
    "float": "float(probe) > 0.5",
    "int": "int(probe * 10) > 5",
    "bool": "bool(probe > 0.5)",
    "item": "probe.item() > 0.5",
    "tolist": "probe.tolist()[0] > 0.5",
    "implicit": "probe > 0.5",
    "method": "probe.sum() > 0.5",
    "index": "float(probe[0]) > 0.5",
    "and": "probe > 0.5 and rank_ok",
}


@pytest.mark.parametrize("read", sorted(READS))
def test_reading_a_random_tensor_is_data_dependent(read, tmp_path):
    src = (
        HEAD + "def f(t, rank, rank_ok):\n    gen = torch.Generator().manual_seed(500 + rank)\n"
        f"    probe = torch.rand(1, generator=gen)\n    if {READS[read]}:\n"
        "        dist.all_reduce(t)\n"
    )
    assert codes(src, tmp_path) == ["CL102"], src


def test_tensor_built_from_a_rank_value_is_rank_dependent(tmp_path):
    src = (
        HEAD + "def f(t, loss):\n    v = torch.tensor([loss.item()])\n"
        "    if float(v) > 1.0:\n        dist.all_reduce(t)\n"
    )
    assert codes(src, tmp_path) == ["CL102"], src


UNIFORM_TENSORS = {
    "reduced": "probe = torch.rand(1)\n    dist.all_reduce(probe)\n",
    "constant": "probe = torch.tensor([1.0])\n",
    "zeros": "probe = torch.zeros(1)\n",
    "shape": "probe = torch.rand(4).shape[0]\n",
    "numel": "probe = torch.rand(4).numel()\n",
}


@pytest.mark.parametrize("case", sorted(UNIFORM_TENSORS))
def test_tensors_equal_on_every_rank_are_not_data(case, tmp_path):
    src = (
        HEAD + f"def f(t):\n    {UNIFORM_TENSORS[case]}"
        "    if float(probe) > 0.5:\n        dist.all_reduce(t)\n"
    )
    assert codes(src, tmp_path) == [], src


def test_int_of_a_plain_number_is_not_data(tmp_path):
    src = (
        HEAD + "import os\n\n\ndef f(t):\n    n = int(os.environ.get('STEPS', '3'))\n"
        "    if int(n) > 2:\n        dist.all_reduce(t)\n"
    )
    assert codes(src, tmp_path) == [], src


# -------------------------------------------------------------------------------- roots


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        ("src=1", "src=0", ["CL101"]),
        ("src=leader + 1", "src=leader", ["CL101"]),
        ("src=root", "src=0", ["CL101"]),  # root = 2 below
        ("src=0", "src=0", []),
        ("src=leader", "src=leader", []),
        ("src=rank", "src=1", []),  # rank == 1 in that arm: the same root
        ("src=rank", "src=0", ["CL101"]),
    ],
)
def test_arms_must_agree_on_the_root(mine, theirs, expected, tmp_path):
    src = (
        HEAD + "def f(t, rank, group):\n    leader = rank - rank % 2\n    root = 2\n"
        f"    if rank == 1:\n        dist.broadcast(t, {mine}, group=group)\n"
        f"    else:\n        dist.broadcast(t, {theirs}, group=group)\n"
    )
    assert codes(src, tmp_path) == expected, src


# ---------------------------------------------------------------- correlated conditions


@pytest.mark.parametrize(
    ("outer", "inner", "fixed"),
    [
        ("rank % 2 == 0", "rank == 0", True),  # rank 0 is even: it never reaches the else arm
        ("rank % 2 == 0", "is_main_process()", True),
        ("rank % 2 == 0", "rank == 1", False),
        ("rank == 0", "rank == 1", False),
        ("rank == 0", "rank == 0", True),
        ("rank % 2 == 1", "rank == 2", False),
    ],
)
def test_condition_fixed_on_the_ranks_that_reach_it(outer, inner, fixed, tmp_path):
    src = (
        HEAD + "def is_main_process():\n    return dist.get_rank() == 0\n\n\n"
        "def f(t, rank):\n"
        f"    if {outer}:\n        dist.barrier()\n    else:\n        dist.barrier()\n"
        f"        if {inner}:\n            dist.all_reduce(t)\n"
    )
    found = lint_source(src, tmp_path).findings
    if fixed:
        assert found == [], src
    else:
        assert found and {f.code for f in found} == {"CL101"}, src
        assert any(f.line == 15 for f in found), src  # the inner all_reduce


# ----------------------------------------------------------------------------- p2p


def test_send_under_a_data_condition_is_reported(tmp_path):
    src = (
        HEAD + "def f(t, rank, peer):\n    probe = torch.rand(1)\n"
        "    if rank % 2 == 0:\n        if float(probe) > 0.5:\n"
        "            dist.send(t, dst=peer)\n    else:\n        dist.recv(t, src=peer)\n"
    )
    assert codes(src, tmp_path) == ["CL102"]


def test_send_in_both_arms_of_a_data_condition_is_fine(tmp_path):
    src = (
        HEAD + "def f(t, u, rank, peer):\n    probe = torch.rand(1)\n"
        "    if rank % 2 == 0:\n        if float(probe) > 0.5:\n"
        "            dist.send(t, dst=peer)\n        else:\n            dist.send(u, dst=peer)\n"
        "    else:\n        dist.recv(t, src=peer)\n"
    )
    assert codes(src, tmp_path) == []


@pytest.mark.parametrize(
    ("send_group", "recv_group", "expected"),
    [
        ("", "", []),
        ("group=pair", "group=pair", []),
        ("group=world", "group=pair", ["CL110", "CL110"]),
        ("", "group=pair", ["CL110", "CL110"]),
    ],
)
def test_send_and_receive_must_be_on_the_same_group(send_group, recv_group, expected, tmp_path):
    sg = f", {send_group}" if send_group else ""
    rg = f", {recv_group}" if recv_group else ""
    src = (
        HEAD + "def f(t, rank, world, pair):\n    if rank % 2 == 0:\n"
        f"        dist.send(t, dst=rank + 1{sg})\n    else:\n"
        f"        dist.recv(t, src=rank - 1{rg})\n"
    )
    assert codes(src, tmp_path) == expected, src


def test_tolist_of_an_array_of_ranks_is_not_data(tmp_path):
    # megatron-core's hierarchical groups: a NumPy rearrangement of the rank list, then tolist()
    src = (
        HEAD + "import numpy as np\n\n\ndef f(ranks, sizes):\n"
        "    for level in range(len(sizes)):\n"
        "        rearranged = np.array(ranks).reshape(-1, sizes[level]).tolist()\n"
        "        for sub_ranks in rearranged:\n            dist.new_group(sub_ranks)\n"
    )
    assert codes(src, tmp_path) == []


# --------------------------------------------------------------------------- payloads

PAYLOADS = {
    "to-dtype": ("buf = t.to(torch.float64)", "buf", True),
    "to-dtype-kw": ("buf = t.to(dtype=torch.bfloat16)", "buf", True),
    "double": ("buf = t.double()", "buf", True),
    "cat-pad": ("buf = torch.cat([t.flatten(), t.new_zeros(3)])", "buf", True),
    "F.pad": ("buf = torch.nn.functional.pad(t, (0, 3))", "buf", True),
    "same-view": ("buf = t.view(-1)", "buf", False),
    "clone": ("buf = t.clone()", "buf", False),
    "to-device": ("buf = t.to('cuda')", "buf", False),
    "other-tensor": ("buf = u", "buf", False),
}


@pytest.mark.parametrize("case", sorted(PAYLOADS))
def test_arms_must_pass_buffers_of_one_dtype_and_size(case, tmp_path):
    made, name, bad = PAYLOADS[case]
    src = (
        HEAD + "def f(t, u, rank):\n    if rank == 1:\n"
        f"        {made}\n        dist.all_reduce({name})\n"
        "    else:\n        dist.all_reduce(t)\n"
    )
    assert codes(src, tmp_path) == (["CL101"] if bad else []), src


def test_buffers_converted_on_every_rank_are_fine(tmp_path):
    src = (
        HEAD + "def f(t, rank):\n    buf = t.to(torch.float64)\n    if rank == 1:\n"
        "        dist.all_reduce(buf)\n    else:\n        dist.all_reduce(buf)\n"
    )
    assert codes(src, tmp_path) == []


def test_both_arms_converting_alike_are_fine(tmp_path):
    src = (
        HEAD + "def f(t, rank):\n    if rank == 1:\n        buf = t.double()\n"
        "        dist.all_reduce(buf)\n    else:\n        b = t.to(torch.float64)\n"
        "        dist.all_reduce(b)\n"
    )
    assert codes(src, tmp_path) == []


def test_send_of_a_converted_buffer_on_one_rank_is_reported(tmp_path):
    src = (
        HEAD + "def f(t, rank, peer, g):\n    if rank == 0:\n        buf = t.double()\n"
        "        dist.send(buf, dst=peer, group=g)\n    else:\n"
        "        dist.send(t, dst=peer, group=g)\n"
    )
    assert [c for c in codes(src, tmp_path) if c != "CL110"] == ["CL101"]


# ------------------------------------------------------------------------------ order


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        ("a, b", "b, a", ["CL101"]),
        ("a, b", "a, b", []),
        ("a, b", "x, y", []),  # a sender's data against a receiver's buffers: no order to tell
        ("a, a", "a, a", []),
    ],
)
def test_same_buffers_in_another_order(mine, theirs, expected, tmp_path):
    m1, m2 = mine.split(", ")
    t1, t2 = theirs.split(", ")
    src = (
        HEAD + "def f(a, b, x, y, rank):\n    if rank == 1:\n"
        f"        dist.all_reduce({m1})\n        dist.all_reduce({m2})\n    else:\n"
        f"        dist.all_reduce({t1})\n        dist.all_reduce({t2})\n"
    )
    assert codes(src, tmp_path) == expected, src


def test_sends_in_another_order_are_reported(tmp_path):
    src = (
        HEAD + "def f(header, mem, rank, peer):\n    if rank == 0:\n"
        "        dist.send(mem, dst=peer)\n        dist.send(header, dst=peer)\n    else:\n"
        "        dist.send(header, dst=peer)\n        dist.send(mem, dst=peer)\n"
    )
    assert [c for c in codes(src, tmp_path) if c != "CL110"] == ["CL101"]


INTERLEAVE = (
    HEAD + "def f(t, u, rank, world_size):\n"
    "    dp = dist.new_group({dp})\n    world = dist.new_group(list(range(world_size)))\n"
    "    if rank == 3:\n        dist.all_reduce(u, group=world)\n"
    "        dist.all_reduce(t, group=dp)\n"
    "    else:\n        dist.all_reduce(t, group=dp)\n"
    "        dist.all_reduce(u, group=world)\n"
)


def test_two_groups_in_another_order_are_a_cycle(tmp_path):
    src = INTERLEAVE.format(dp="list(range(1, world_size, 2))")
    found = lint_source(src, tmp_path).findings
    assert [f.code for f in found] == ["CL101"]
    assert "wait-for cycle" in found[0].message


def test_group_the_condition_does_not_split_keeps_its_own_order(tmp_path):
    # dp holds only even ranks: rank 3 is not a member, so only WORLD is split
    src = INTERLEAVE.format(dp="list(range(0, world_size, 2))")
    assert codes(src, tmp_path) == []


def test_two_orthogonal_subgroups_in_another_order_drain(tmp_path):
    # rank 3 runs dp then tp, its tp peer and dp peer run tp then dp: they share one rank
    # only, so every wait ends (no cycle)
    body = (
        "    if rank == 3:\n        dist.all_reduce(t, group=dp_group)\n"
        "        dist.all_reduce(t, group=tp_group)\n    else:\n"
        "        dist.all_reduce(t, group=tp_group)\n        dist.all_reduce(t, group=dp_group)\n"
    )
    assert codes(LOOP_GROUPS.format(body=body), tmp_path) == []


def test_default_group_counts_as_the_whole_world(tmp_path):
    src = (
        HEAD
        + "def f(t, rank, world_size):\n    dp = dist.new_group(list(range(1, world_size, 2)))\n"
        "    if rank == 3:\n        dist.barrier()\n        dist.all_reduce(t, group=dp)\n"
        "    else:\n        dist.all_reduce(t, group=dp)\n        dist.barrier()\n"
    )
    assert [c for c in codes(src, tmp_path) if c != "CL105"] == ["CL101"]


def test_buffer_padded_in_place_in_one_arm_only(tmp_path):
    # the environment runs through both arms: the else arm must still see `v` unpadded
    src = (
        HEAD
        + "def f(v, out, rank):\n    if rank == 2:\n        v = torch.cat([v, v.new_zeros(1)])\n"
        "        dist.all_to_all_single(out, v)\n"
        "    else:\n        dist.all_to_all_single(out, v)\n"
    )
    assert codes(src, tmp_path) == ["CL101"]


def test_and_condition_does_not_exclude_its_ranks_from_the_else_arm(tmp_path):
    # rank 0 with `ready` false takes the else arm: the inner test still splits the ranks
    src = (
        HEAD + "def f(t, rank, ready):\n    if rank == 0 and ready:\n        pass\n"
        "    else:\n        if rank == 0:\n            dist.all_reduce(t)\n"
    )
    found = lint_source(src, tmp_path).findings
    assert any(f.code == "CL101" and f.line == 10 for f in found), found


def test_buffers_sent_to_other_peers_are_not_a_reorder(tmp_path):
    src = (
        HEAD + "def f(a, b, rank):\n    if rank == 0:\n"
        "        dist.send(a, dst=1)\n        dist.send(b, dst=2)\n    else:\n"
        "        dist.send(b, dst=0)\n        dist.send(a, dst=3)\n"
    )
    assert "CL101" not in codes(src, tmp_path)
