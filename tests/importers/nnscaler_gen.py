# ruff: noqa: E501  (the generated code it writes keeps nnScaler's long lines)
"""Generated-code files in nnScaler's shape (`gencode{rank}.py`), written for the tests.

Modelled on what `nnscaler.codegen.ModuleCodeGen` / `ScheduleCodeGen` emit (class `GenModel`
with `rank`, `init_group` calls, `Reducer`s, `segmentN`/`adapterN` methods calling
`nnscaler.runtime.adapter.*`, and an end-to-end `_train_step`). Only the lines that matter to
communication are realistic; the compute is a placeholder.
"""

from __future__ import annotations

from pathlib import Path

HEADER = """from typing import *
import torch
import nnscaler
import _operator

runtime_version = '0.7'


class GenModel(nnscaler.runtime.module.ParallelModule):
    use_scheduler = {use_scheduler}
    nmicros_per_scheduler_step = {nmicros}
    rank = {rank}
    world_size = {world}

    def __init__(self, init_params=True, build_buckets=True, *args, async_op=False, max_bucket_size_bytes=None, zero_use_reduce_scatter=False, **kwargs):
        super().__init__()
        # communication groups
{groups}
        self.register_parameter('w_10', torch.nn.Parameter(torch.empty((8, 8), dtype=torch.float32)))
{reducers}
        self._post_init(init_params)
"""


def tp_dp(folder: Path, tp_ops: dict[int, str] | None = None) -> Path:
    """4 ranks, tp=2 × dp=2, no pipeline: TP adapters inside one segment, DP weight reducers.

    `tp_ops` replaces the forward TP adapter on some ranks (e.g. {1: "allgather_split"}).
    """
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(4):
        tp = [0, 1] if rank < 2 else [2, 3]
        dp = [0, 2] if rank % 2 == 0 else [1, 3]
        op = (tp_ops or {}).get(rank, "allreduce_identity")
        groups = "\n".join(
            f"        self.init_group(ranks={g})" for g in ([0, 2], [1, 3], [0, 1], [2, 3])
        )
        reducers = (
            f"        self.wreducer80 = nnscaler.runtime.adapter.Reducer(ranks={dp}, "
            "reduce_op='sum', async_op=async_op, zero=False, "
            "max_bucket_size_bytes=max_bucket_size_bytes, zero_ngroups=1)\n"
            "        self.wreducer80.add_param(self.w_10)\n"
            "        self.add_reducer(self.wreducer80)\n"
        )
        body = HEADER.format(
            use_scheduler=False, nmicros=1, rank=rank, world=4, groups=groups, reducers=reducers
        )
        body += f"""
    def segment60(self, x_5):
        x_21 = nnscaler.runtime.adapter.nn.split_allgather(x_5, dim=0, ranks={tp})
        w_22 = nnscaler.runtime.adapter.nn.identity_allreduce(self.w_10, ranks={tp})
        # File "model.py", line 12, in forward,  y = x @ w
        matmul_23 = torch.matmul(x_21, w_22)
        matmul_24 = nnscaler.runtime.adapter.nn.{op}(matmul_23, dim=0, ranks={tp})
        sum_25 = torch.sum(matmul_24)
        return sum_25

    def reducer80(self):
        self.wreducer80.sync_grads()
        return

    def _forward_impl(self, x):
        sum_25 = self.segment60(x)
        return sum_25
"""
        (folder / f"gencode{rank}.py").write_text(body)
    return folder


def pipeline(folder: Path, microbatches: int = 2, blocking_head_to_head: bool = False) -> Path:
    """2 stages (ranks 0, 1), end-to-end `_train_step` in 1F1B order with blocking moves.

    With `blocking_head_to_head`, rank 0 sends the next microbatch's activation before it
    receives the previous gradient while rank 1 sends that gradient before it receives the
    activation: two blocking sends facing each other.
    """
    folder.mkdir(parents=True, exist_ok=True)
    groups = "        self.init_group(ranks=[0, 1])"
    stage0 = HEADER.format(
        use_scheduler=True, nmicros=microbatches, rank=0, world=2, groups=groups, reducers=""
    )
    stage0 += """
    def segment30(self, data_5):
        # File "model.py", line 20, in forward,  h = self.layer0(x)
        linear_6 = torch.nn.functional.linear(data_5, self.w_10, bias=None)
        return linear_6

    def adapter40(self, linear_6):
        _ = nnscaler.runtime.adapter.move(linear_6, shape=(4, 8), dtype=torch.float32, src=0, dst=1)
        return

    def adapter45(self):
        glinear_7 = nnscaler.runtime.adapter.move((), shape=(4, 8), dtype=torch.float32, src=1, dst=0)
        return glinear_7


def _train_step(model, dataloader_3):
    _ = None
    model.zero_grad()
"""
    stage1 = HEADER.format(
        use_scheduler=True, nmicros=microbatches, rank=1, world=2, groups=groups, reducers=""
    )
    stage1 += """
    def adapter40(self):
        linear_8 = nnscaler.runtime.adapter.move((), shape=(4, 8), dtype=torch.float32, src=0, dst=1)
        return linear_8

    def segment35(self, linear_8):
        # File "model.py", line 21, in forward,  loss = self.layer1(h).sum()
        sum_9 = torch.sum(linear_8)
        return sum_9

    def adapter45(self, glinear_7):
        _ = nnscaler.runtime.adapter.move(glinear_7, shape=(4, 8), dtype=torch.float32, src=1, dst=0)
        return


def _train_step(model, dataloader_3):
    _ = None
    model.zero_grad()
"""
    s0, s1 = [], []
    for mb in range(microbatches):
        f0 = [
            f"    data_{mb} = next(*(dataloader_3, ))",
            f"    linear_6_{mb} = nnscaler.runtime.executor.fexecute('segment30', model.segment30, *(data_{mb}, ), requires_grad=True)",
            f"    _ = nnscaler.runtime.executor.aexecute(model.adapter40, *(linear_6_{mb}, ), requires_grad=False)",
        ]
        b0 = [
            f"    glinear_7_{mb} = nnscaler.runtime.executor.aexecute(model.adapter45, *(), requires_grad=False)",
            f"    _ = nnscaler.runtime.executor.backward('segment30', (), (linear_6_{mb}, ), (glinear_7_{mb}, ))",
        ]
        f1 = [
            f"    linear_8_{mb} = nnscaler.runtime.executor.aexecute(model.adapter40, *(), requires_grad=True)",
            f"    sum_9_{mb} = nnscaler.runtime.executor.fexecute('segment35', model.segment35, *(linear_8_{mb}, ), requires_grad=True)",
            f"    glinear_7_{mb} = nnscaler.runtime.executor.backward('segment35', (linear_8_{mb}, ), (sum_9_{mb}, ), (None, ))",
            f"    _ = nnscaler.runtime.executor.aexecute(model.adapter45, *(glinear_7_{mb}, ), requires_grad=False)",
        ]
        s1.append(f1)
        s0.append((f0, b0))
    # rank 0: F0 F1 … then B0 B1 … (1F1B with 2 stages: warm-up 1, then alternate)
    lines0: list[str] = []
    lines0 += s0[0][0]
    for mb in range(1, microbatches):
        if blocking_head_to_head:
            lines0 += s0[mb][0] + s0[mb - 1][1]
        else:
            lines0 += s0[mb - 1][1] + s0[mb][0]
    lines0 += s0[-1][1]
    lines1 = [line for block in s1 for line in block]
    if not blocking_head_to_head:
        # the fixed order: stage 0 backward of mb-1 first, then forward of mb
        pass
    (folder / "gencode0.py").write_text(stage0 + "\n".join(lines0) + "\n    return\n")
    (folder / "gencode1.py").write_text(stage1 + "\n".join(lines1) + "\n    return\n")
    return folder
