"""`torch.distributed.pipelining`, as the per-rank evaluator sees it: a stage and its schedule.

`PipelineStage(module, stage_index, num_stages, device, group=None)` places this rank's stage
in a pipeline; `ScheduleGPipe(stage, n_microbatches)` / `Schedule1F1B(...)` and their `step()`
move activations forward and gradients backward between neighbouring stages, with point-to-
point operations the user never writes. What decides whether the ranks meet is what each
rank gives them: its stage index (two ranks claiming one stage, a stage nobody runs), the
number of stages, the number of microbatches (one rank splitting its batch in 4, its
neighbour in 2), and whether every stage calls `step()` as often.

torch (2.13) runs every schedule with a stage per rank in this shape, which is what is recorded:
on the first `step()` of a stage built without `input_args`, shape inference passes metadata
forward (`recv_object_list` from the previous stage, `send_object_list` to the next); then, per
microbatch, the forward receive is waited before the stage computes and the forward send is
posted and waited at the end of the forward phase; then the same backward. 1F1B interleaves
the phases, but its sends are asynchronous too, so with equal counts both orders complete and
with unequal counts both leave a receive waiting for a send that never comes: for a verdict the
GPipe order is exact enough. A schedule over several stages per rank (interleaved, looped) is
not modelled: the evaluation stops there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SINGLE = frozenset({"ScheduleGPipe", "Schedule1F1B"})
MULTI = frozenset(
    {"ScheduleInterleaved1F1B", "ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble"}
    | {"ScheduleZBVZeroBubble", "ScheduleDualPipeV", "PipelineScheduleMulti"}
)


@dataclass
class Stage:
    """This rank's `PipelineStage`."""

    index: int
    num_stages: int
    members: tuple[int, ...]  # the pipeline group's global ranks, by stage index
    group_name: str  # "WORLD" or the evaluator's name of the group
    shapes_given: bool  # input_args given: no shape inference on the first step
    inferred: bool = False

    def attribute(self, attr: str) -> object:
        """What a program reads of its stage (`stage.is_last` picks who feeds the targets)."""
        if attr == "is_first":
            return self.index == 0
        if attr == "is_last":
            return self.index == self.num_stages - 1
        if attr == "stage_index":
            return self.index
        if attr == "num_stages":
            return self.num_stages
        return None


@dataclass
class Schedule:
    """A single-stage-per-rank schedule over one `Stage`."""

    kind: str
    stage: Stage
    n_microbatches: int
    steps: int = 0
    pending: list[str] = field(default_factory=list)


@dataclass
class ScheduleMethod:
    schedule: Schedule
    attr: str


def step_actions(schedule: Schedule, new_handle, backward: bool = True) -> list[dict]:
    """The point-to-point actions of one `step()` of `schedule`, in this rank's order
    (`eval()`: the forward phase only). `new_handle()` names an async handle."""
    st = schedule.stage
    first, last = st.index == 0, st.index == st.num_stages - 1
    prev = st.members[st.index - 1] if not first else None
    nxt = st.members[st.index + 1] if not last else None
    group = {} if st.group_name == "WORLD" else {"group": st.group_name}
    out: list[dict] = []
    if not st.shapes_given and not st.inferred:
        if prev is not None:
            out.append({"op": "recv", "peer": prev, "label": "shape inference", **group})
        if nxt is not None:
            out.append({"op": "send", "peer": nxt, "label": "shape inference", **group})
        st.inferred = True

    def phase(recv_from: int | None, send_to: int | None, what: str) -> None:
        sends: list[str] = []
        for k in range(schedule.n_microbatches):
            if recv_from is not None:
                h = new_handle()
                out.append(
                    {"op": "irecv", "peer": recv_from, "handle": h, "label": f"{what} {k}", **group}
                )
                out.append({"op": "wait", "handles": [h]})
            if send_to is not None:
                h = new_handle()
                out.append(
                    {"op": "isend", "peer": send_to, "handle": h, "label": f"{what} {k}", **group}
                )
                sends.append(h)
        if sends:
            out.append({"op": "wait", "handles": sends})

    phase(prev, nxt, "forward")
    if backward:
        phase(nxt, prev, "backward")
    schedule.steps += 1
    return out
