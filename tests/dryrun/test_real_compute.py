"""Real compute only for a value that decides communication (issue 30, item 5): a test of a
number fake tensors did not compute is decided first; the real re-run follows only when its
outcomes communicate differently, and the note counts the ranks that needed it."""

from __future__ import annotations

from pathlib import Path

from commlint.graph.check import check_trace

HEAD = (
    "import torch\n"
    "import torch.distributed as dist\n"
    "dist.init_process_group('gloo')\n"
    "torch.manual_seed(dist.get_rank())\n"
    "w = torch.nn.Linear(64, 64)\n"
    "loss = w(torch.randn(8, 64)).pow(2).mean()  # each rank's own\n"
)


def record(program: Path):
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    options = DryRunOptions(
        program=str(program), args=[], world_size=2, nproc_per_node=2, ranks=[0, 1],
        timeout=60, jobs=2,
    )  # fmt: skip
    result = dry_run(options)
    return result, result.trace(options)


def test_a_test_that_decides_no_communication_stays_on_fake_tensors(tmp_path: Path):
    program = tmp_path / "logs.py"
    program.write_text(
        HEAD + "if loss.item() > 10:  # only what is printed depends on it\n"
        "    print('high loss')\n"
        "else:\n"
        "    print('low loss')\n"
        "dist.all_reduce(torch.ones(2))\n"
        "assert torch.equal(torch.ones(2) * loss, loss * torch.ones(2))\n"
        "assert torch.allclose(loss * 2, loss) is False, 'a check as accelerate writes it'\n"
        "dist.barrier()\n"
    )
    result, trace = record(program)
    assert result.mode == "fake", result.notes
    assert not any("recorded again" in n for n in result.notes), result.notes
    assert [a.op for a in trace.ranks[1]] == ["all_reduce", "barrier"] and not trace.ends
    assert check_trace(trace, None).findings == []


def test_a_test_that_decides_communication_is_computed_and_counted(tmp_path: Path):
    program = tmp_path / "steers.py"
    program.write_text(
        HEAD + "if loss.item() > 1e9:  # never true: the real value says so\n"
        "    dist.barrier()\n"
        "dist.all_reduce(torch.ones(2))\n"
    )
    result, trace = record(program)
    assert result.mode == "real"
    assert f"stopped under fake tensors at {program}:7" in result.notes[0]
    assert "(2 of 2 ranks needed real values)" in result.notes[0]
    assert [a.op for a in trace.ranks[0]] == ["all_reduce"]
    assert check_trace(trace, None).findings == []


def test_bookkeeping_in_a_large_integer_buffer_stays_on_fake_tensors(tmp_path: Path):
    # accelerate's copy_tensor_to_devices: a shape and dtype code sent in a 2^20-element
    # torch.int buffer made with torch.empty, summed, read back with nonzero() and int();
    # the code and shape decide the dtype and size of rank 1's next all-reduce
    program = tmp_path / "shape_header.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "rank = dist.get_rank()\n"
        "header = torch.empty(2**20, dtype=torch.int)\n"
        "if rank == 0:\n"
        "    header[:3] = torch.tensor([2, 3, 7], dtype=int)\n"
        "dist.all_reduce(header)\n"
        "header = header[header.nonzero()]\n"
        "code = int(header[-1:][0])\n"
        "shape = header[:-1].view(-1).tolist()\n"
        "t = torch.ones(2, 3) if rank == 0 else torch.zeros(shape, dtype={7: torch.float}[code])\n"
        "dist.all_reduce(t)\n"
    )
    result, trace = record(program)
    assert result.mode == "fake", result.notes
    assert not check_trace(trace).findings
    reduces = [a for a in trace.ranks[1] if a.op == "all_reduce"]
    assert [(a.shape, a.dtype) for a in reduces] == [([1048576], "int32"), ([2, 3], "float32")]
    assert "torch.empty" in trace.meta["assumes"]
