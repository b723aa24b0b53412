"""torch.distributed.pipelining's own schedule tools, driven without processes or GPUs.

The schedule classes need stage objects only for their sizes; `_MockStage` carries those.
Used by the tests that put commlint's verdicts next to torch's `_simulate_comms_compute`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch.distributed.pipelining import schedules as ts

from commlint.plans import schedules as sch

_ROOT = str(Path(__file__).resolve().parents[2])  # the repository: bench/ is a package there
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
from bench.torch_stage import MockStage as _MockStage  # noqa: E402


def schedule(name: str, pp: int, microbatches: int):
    """A torch schedule object built for rank 0 (its orders cover every rank)."""
    if name == "1f1b":
        sched = ts.Schedule1F1B(_MockStage(0, pp, pp, 0), n_microbatches=microbatches)
    elif name == "gpipe":
        sched = ts.ScheduleGPipe(_MockStage(0, pp, pp, 0), n_microbatches=microbatches)
    elif name == "interleaved":
        stages = [_MockStage(0, 2 * pp, pp, 0), _MockStage(pp, 2 * pp, pp, 0)]
        sched = ts.ScheduleInterleaved1F1B(stages, n_microbatches=microbatches)
    elif name == "zbv":
        stages = [_MockStage(0, 2 * pp, pp, 0), _MockStage(2 * pp - 1, 2 * pp, pp, 0)]
        sched = ts.ScheduleZBVZeroBubble(stages, n_microbatches=microbatches)
    elif name == "dualpipev":
        stages = [_MockStage(0, 2 * pp, pp, 0), _MockStage(2 * pp - 1, 2 * pp, pp, 0)]
        sched = ts.ScheduleDualPipeV(stages, n_microbatches=microbatches)
    else:
        raise ValueError(name)
    return sched


def pipeline_order(name: str, pp: int, microbatches: int) -> dict[int, list]:
    """Compute-only `pipeline_order` of a torch schedule class."""
    sched = schedule(name, pp, microbatches)
    return {r: [a for a in acts if a is not None] for r, acts in sched.pipeline_order.items()}


def runtime_order(name: str, pp: int, microbatches: int) -> dict[int, list]:
    """What `_PipelineScheduleRuntime` executes: `pipeline_order_with_comms`."""
    sched = schedule(name, pp, microbatches)
    return {r: list(acts) for r, acts in sched.pipeline_order_with_comms.items()}


def without_reduce_grad(order: dict[int, list]) -> dict[int, list]:
    return {
        r: [a for a in acts if a.computation_type != ts._ComputationType.REDUCE_GRAD]
        for r, acts in order.items()
    }


def stage_to_rank(name: str, pp: int):
    if name in ("zbv", "dualpipev"):
        return lambda s: s if s < pp else 2 * pp - 1 - s
    return lambda s: s % pp


def num_stages(name: str, pp: int) -> int:
    return 2 * pp if name in ("interleaved", "zbv", "dualpipev") else pp


def add_send_recv(order: dict[int, list], name: str, pp: int) -> dict[int, list]:
    return ts._add_send_recv(
        {r: list(a) for r, a in order.items()}, stage_to_rank(name, pp), num_stages(name, pp)
    )


def simulate(comms: dict[int, list], name: str, pp: int) -> str | None:
    """None when torch's simulator accepts the schedule, else its error."""
    try:
        ts._simulate_comms_compute(
            {r: list(a) for r, a in comms.items()}, stage_to_rank(name, pp), num_stages(name, pp)
        )
    except (ValueError, RuntimeError, AssertionError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def to_csv(order: dict[int, list]) -> str:
    """The CSV `_load_csv` reads: one row per rank."""
    return "\n".join(",".join(str(a) for a in order[r]) for r in sorted(order)) + "\n"


def parse(text: str) -> ts._Action:
    return ts._Action.from_str(text)


def as_steps(order: dict[int, list]) -> dict[int, list[sch.Step]]:
    return {r: [sch.parse_action(str(a), "torch") for a in acts] for r, acts in order.items()}
