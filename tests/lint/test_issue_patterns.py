"""Sketches of hangs reported in real issues (issue 16's list), each decided from the file:
the finding the linter must give, at the line a user would fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_server import run_commlint

PATTERNS = Path(__file__).parent / "patterns"

EXPECTED = {
    # send/send head to head in a guarded pipeline exchange (every stage sends first)
    "pipe_send_send.py": [(10, "CL115")],
    # isend to a peer that never receives, irecv from a rank that never sends
    "isend_no_partner.py": [(12, "CL115")],
    # 13 documents over the ranks contiguously: the last rank gets fewer batches
    "shard_remainder.py": [(12, "CL101")],
    # `heads[rank::world]`: 5 heads over 2 ranks, 3 vs 2 all_reduces
    "strided_heads.py": [(9, "CL101")],
    # float32 on odd ranks, bfloat16 on even ranks, then one all_reduce
    "dtype_per_rank.py": [(9, "CL116")],
    # new_group(ranks=<a list that depends on the rank>)
    "new_group_rank_list.py": [(7, "CL117")],
    # broadcast(src=0) on the tensor-parallel group kept from a loop: [2, 3] on ranks 2, 3
    # (`rank, world = get_rank(), get_world_size()`: world is the same on every rank)
    "broadcast_root_outside_loop_group.py": [(12, "CL116")],
    # a break out of the training loop on some ranks only: the others all_reduce again
    "rank_break.py": [(8, "CL103")],
    "loss_break.py": [(9, "CL103")],
    "time_break.py": [(10, "CL103")],
    # a metrics tracker's log_epoch() -> reduce_mean() all_reduce under is_main_process()
    "helper_method.py": [(20, "CL101")],
    # an OOM swallowed on one rank, which then skips the step's all_reduces
    "oom_continue.py": [(10, "CL103")],
    # HF Trainer callbacks: `state.is_world_process_zero`, `trainer.is_world_process_zero()`
    "hf_callbacks.py": [(10, "CL101"), (18, "CL101")],
    # a `finally` barrier after a `try` whose load of this rank's shard can fail on that
    # rank alone (it goes to `finally` while the others all_reduce)
    "finally_after_rank_load.py": [(11, "CL104")],
    # a handler's barrier after a `try` whose own computation can fail on one rank
    "handler_after_local_work.py": [(10, "CL104")],
    # `world_size > 1` inside a rank-0 branch is decided (true): the all_reduce is rank 0's
    "world_size_guard_rank0.py": [(7, "CL101")],
    # a constant flag tensor set on the ranks whose loss is high, read without a reduction
    "constant_flag_set_locally.py": [(10, "CL102")],
    # patience counted on this rank's own validation loss, then a break out of the training
    # loop whose all_reduces the other ranks still run (an implicit flow: `bad += 1`)
    "patience_unreduced.py": [(19, "CL103")],
    # collectives in the iteration order of a set, in a helper no entry point of the file
    # calls (the per-rank evaluation never runs it); `set(range(n))` iterates alike everywhere
    "set_order_helper.py": [(5, "CL118")],
    # per-arm payloads in a script without a `__main__` guard (its top level is evaluated
    # rank by rank): a float16 broadcast source with float32 receivers, all_to_all split
    # lists that are not each other's transpose, a send padded to a multiple of 128 into a
    # receive sized from the raw length
    "broadcast_f16_source.py": [(11, "CL116")],
    "all_to_all_splits_not_transposed.py": [(12, "CL116")],
    "send_padded_recv_raw.py": [(10, "CL116")],
    # tied-embedding groups that the first and the last stage build from different lists
    "tied_embedding_groups.py": [(12, "CL117")],
    # one role per rank (torch's ddp_under_dist_autograd_test), the trainers forget the group
    # the other roles create: new_group waits for them (evaluated rank by rank at the declared
    # 4 ranks), and the roles' arms differ
    "role_dispatch_missing_group.py": [(8, "CL115"), (22, "CL108"), (24, "CL108")],
    # megatron's generation loop with the broadcast's result thrown away: each pipeline rank
    # stops on the tokens its own stage sampled
    "generation_local_exit.py": [(34, "CL103")],
    # ... or with the broadcast kept but sampled from a generator seeded with the rank
    "generation_rank_seeded_exit.py": [(34, "CL103")],
    # rank 0 builds first, then the others, and the build all-reduces: rank 0's all_reduces
    # meet the others' barrier (the executor's own CL112 warning beside)
    "rank0_first_build_allreduce.py": [(19, "CL112"), (30, "CL101"), (33, "CL101")],
    # megatron-core 0.16's dataset build, where the build takes only barriers: they pair
    # whatever the order, no CL101 (the executor's CL112 warning stays)
    "rank0_first_build_barriers.py": [(19, "CL112")],
}
# Correct programs that look like one of the above: no finding.
CLEAN = {
    # one role per rank, each creating the same groups; an unknown rank raises (a crash with
    # a traceback, not a hang): the raising arm is not compared with the others
    "role_dispatch_raise.py",
    # transformers' main_process_first: the `try` barrier on the others, the `finally`
    # barrier on the main process: one barrier per rank, raise or not
    "finally_main_first.py",
    # a `finally` barrier after a `try` whose all_reduces every rank runs, where nothing can
    # fail on some ranks only: every rank reaches the barrier together (a real run is ok)
    "finally_both_communicate.py",
    # `torch.scatter(...)` is a module's function: never resolved to a method of a class
    # named after `torch` (lightning's TorchCollective.scatter, transformers 5.24)
    "module_function_not_a_method.py",
    # lightning's barrier fallback: the `try` is the one collective; failing on every rank
    # alike, it sends every rank to the same all_reduce
    "handler_fallback_collective.py",
    # a closure handed to an optimizer of trials (optuna's study.optimize) on rank 0,
    # matched by a loop of the same broadcasts on the others
    "hp_search_callback.py",
    # lightning's SIGTERM broadcast: the flag is broadcast, or the constant 0 on every rank
    "sigterm_broadcast.py",
    # the same patience on an all-reduced validation loss: every rank breaks together
    "patience_reduced.py",
    # megatron-core 0.16's static generation loop: logits broadcast from the last pipeline
    # stage, sampled by a helper from a generator seeded alike everywhere, written into the
    # tokens, turned into done flags by another helper: `torch.all(done)` is the same on
    # every rank and they leave together
    "generation_broadcast_exit.py",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pattern_is_reported_at_its_line(name):
    out = run_commlint(["check", "--format", "json", str(PATTERNS / name)], timeout=300)

    assert out.returncode == 1, out.stdout + out.stderr
    found = sorted((f["line"], f["code"]) for f in json.loads(out.stdout)["findings"])
    assert found == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_correct_look_alike_is_clean(name):
    out = run_commlint(["check", "--format", "json", str(PATTERNS / name)], timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["findings"] == []


def test_every_pattern_file_is_checked():
    assert sorted(p.name for p in PATTERNS.glob("*.py")) == sorted([*EXPECTED, *CLEAN])
