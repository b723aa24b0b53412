"""The trace / plan file format, version 1: the vocabulary every front end produces.

A `Trace` is what each rank of a distributed job did (or will do) on the network: an ordered
list of `Action`s per global rank, the named process groups they use, and provenance.
Every front end (dry-run, plan generators, Flight Recorder and other importers) builds one;
the checker in `commlint.graph` consumes it. The YAML/JSON form is a stable user-facing
contract documented in docs/trace-format.md.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

WORLD = "WORLD"

# The largest world size a trace may name (2**20 ranks; the largest published training jobs
# use about 100k GPUs). Ranks without actions cost memory in the checker's per-rank state,
# so a 44-byte file must not be able to ask for a billion of them.
MAX_WORLD_SIZE = 1 << 20

P2P_OPS = frozenset({"send", "recv", "isend", "irecv"})
ASYNC_P2P_OPS = frozenset({"isend", "irecv"})
SEND_OPS = frozenset({"send", "isend"})
COLLECTIVE_OPS = frozenset(
    {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "gather",
        "scatter",
        "all_to_all",
        "barrier",
    }
)
ROOTED_OPS = frozenset({"broadcast", "reduce", "gather", "scatter"})
REDUCING_OPS = frozenset({"all_reduce", "reduce_scatter", "reduce"})
OPS = (*sorted(P2P_OPS), *sorted(COLLECTIVE_OPS), "wait", "sync")

Op = Literal[
    "send",
    "recv",
    "isend",
    "irecv",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "barrier",
    "wait",
    "sync",
]

DTYPE_BYTES = {
    "float64": 8,
    "double": 8,
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "int64": 8,
    "long": 8,
    "int32": 4,
    "int": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "complex64": 8,
    "complex128": 16,
}


def normalize_dtype(dtype: str | None) -> str | None:
    """`torch.float32` and `float32` name the same dtype."""
    if dtype is None:
        return None
    return dtype.removeprefix("torch.")


class Action(BaseModel):
    """One communication-related action of one rank, in issue order."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)

    op: Op = Field(description="What the rank does: a p2p op, a collective, `wait` or `sync`.")
    group: str = Field(
        default=WORLD, description="Name of the process group; `WORLD` is every rank."
    )
    peer: int | None = Field(
        default=None, description="Global rank of the other side of a send/recv/isend/irecv."
    )
    root: int | None = Field(
        default=None, description="Global rank of the root of broadcast/reduce/gather/scatter."
    )
    tag: int = Field(default=0, description="Point-to-point tag; sends match receives per tag.")
    is_async: bool | None = Field(
        default=None,
        alias="async",
        description="Collective issued with `async_op=True`; completes only when waited.",
    )
    handle: str | None = Field(
        default=None,
        description="Name of the work handle of an async op, for a later `wait` to name.",
    )
    handles: list[str] | None = Field(
        default=None, description="For `wait`: the handles it waits for, in order."
    )
    batch: str | None = Field(
        default=None,
        description="Consecutive p2p ops with the same batch name were issued together "
        "(`batch_isend_irecv`, coalescing): under nccl they start as one.",
    )
    shape: list[int] | None = Field(default=None, description="Tensor shape, when known.")
    dtype: str | None = Field(default=None, description="Tensor dtype (`float32`, `bfloat16`…).")
    bytes: int | None = Field(
        default=None, description="Payload size in bytes, when the shape is not known."
    )
    reduce_op: str | None = Field(
        default=None, description="Reduction of all_reduce/reduce/reduce_scatter (`sum`, `max`…)."
    )
    in_splits: list[int] | None = Field(
        default=None, description="all_to_all: elements this rank sends to each group member."
    )
    out_splits: list[int] | None = Field(
        default=None, description="all_to_all: elements this rank receives from each member."
    )
    site: str | None = Field(
        default=None, description="Call site as `file:line` (the user's frame), when known."
    )
    stack: list[str] | None = Field(
        default=None, description="Further frames, innermost first (`file:line in func`)."
    )
    via: str | None = Field(
        default=None,
        description="The installed framework's own frame that made the call, between the "
        "user's line and torch (`megatron/core/pipeline_parallel/p2p_communication.py:392 in "
        "_communicate`), when a framework made it.",
    )
    label: str | None = Field(
        default=None, description="Free text shown in reports (`F3 send_forward`, `grad bucket 2`)."
    )
    # Nondeterminism (docs/nondeterminism.md): where the issue order is decided at run time.
    thread: str | None = Field(
        default=None,
        description="Host thread that issued the op (name or id); None is the main thread. "
        "Ops of different threads may interleave in any order between fences.",
    )
    stream: str | None = Field(
        default=None, description="Device stream the op was enqueued on, when known."
    )
    bucket: int | None = Field(
        default=None,
        description="DDP gradient bucket: the fused all_reduce of bucket k, or an op issued "
        "from the gradient hook of a parameter in bucket k. Issued when gradients become "
        "ready, so its position among other bucket ops of its window varies between runs.",
    )

    def numel(self) -> int | None:
        """Element count from `shape`, if known."""
        if self.shape is None:
            return None
        n = 1
        for d in self.shape:
            n *= d
        return n

    def payload_bytes(self) -> int | None:
        """Payload size: `bytes` if given, else shape × dtype size when both are known."""
        if self.bytes is not None:
            return self.bytes
        n = self.numel()
        size = DTYPE_BYTES.get(normalize_dtype(self.dtype) or "")
        if n is None or size is None:
            return None
        return n * size

    def describe(self) -> str:
        """Short human form: `all_reduce(tp0)`, `send(→2)`, `wait(h0)`."""
        if self.op in P2P_OPS:
            arrow = "→" if self.op in SEND_OPS else "←"
            group = "" if self.group == WORLD else f", {self.group}"
            tag = f", tag {self.tag}" if self.tag else ""
            return f"{self.op}({arrow}{self.peer}{group}{tag})"
        if self.op == "wait":
            return f"wait({', '.join(self.handles or [])})"
        if self.op == "sync":
            return "sync"
        root = f", root {self.root}" if self.root is not None else ""
        return f"{self.op}({self.group}{root})"


class SharedAction(Action):
    """An `Action` object that several ranks' lists share (generated plans share one object
    per group and call). It is immutable: changing it in place would change every rank that
    holds it. Replace it instead: `trace.ranks[r][i] = a.model_copy(update={...})`."""

    model_config = ConfigDict(frozen=True)


# Every field's default, for building actions without validation (`built_action`).
ACTION_DEFAULTS: dict[str, Any] = {
    name: f.get_default(call_default_factory=True) for name, f in Action.model_fields.items()
}
_new_action = Action.__new__
_set_attr = object.__setattr__


def built_action(data: dict[str, Any], fields_set: set[str], cls: type[Action] = Action) -> Action:
    """An `Action` (or `SharedAction`) from a complete field dict, without pydantic's
    validation — for front ends that build only valid actions by construction (generated
    plans, lowered pipelining schedules; their tests check them) and build millions: the
    validation was most of their cost. `data` must hold every field (start from
    `ACTION_DEFAULTS`); `fields_set` names the fields given explicitly. Use `SharedAction`
    when one object stands for the same action of many ranks, `Action` when each is its own.
    The object is used as is: the caller hands over `data` and `fields_set`."""
    obj = _new_action(cls)
    _set_attr(obj, "__dict__", data)
    _set_attr(obj, "__pydantic_fields_set__", fields_set)
    _set_attr(obj, "__pydantic_extra__", None)
    _set_attr(obj, "__pydantic_private__", None)
    return obj


class CompactRow(NamedTuple):
    """The layout of one action of a rank held compactly: a plain tuple in this field order
    (not an `Action`, not even this class: a tuple subclass costs a second allocation per
    row). An `isend`/`irecv` on WORLD with no payload description (`peer`, `handle`, `tag`),
    or a `wait` (`handles`). Handles are any hashable values unique within the rank; `label`
    is the importer's. Importers that produce hundreds of thousands of such actions
    (pipelining schedules) keep them as rows in a lazy `ranks` dict (`compact_rows(rank)`);
    the checker reads the rows by position, and reading `trace.ranks[r]` builds the rank's
    `Action`s from them with the importer's handle and label strings and sites."""

    op: str
    peer: int | None = None
    handle: object = None  # any hashable, unique within the rank
    handles: tuple[object, ...] = ()
    label: object = None
    tag: int = 0


# An action's `label` containing this marks a call torch's own code made (DDP, Join, FSDP),
# not the program: the checker does not ask the user to wait on its handles (CL206).
TORCH_ISSUED = "issued by torch"


class RankEnd(BaseModel):
    """How a rank's trace ended, when it did not simply run to its end (dry-run, dumps)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["finished", "exception", "exit", "timeout"] = Field(
        description="`exception`: the rank raised; `exit`: it called sys.exit/os._exit; "
        "`timeout`: the recorder stopped it (it looped or blocked)."
    )
    message: str | None = Field(default=None, description="Exception text or exit code.")
    site: str | None = Field(default=None, description="Where it happened, `file:line`.")


class Trace(BaseModel):
    """Per-rank communication of one distributed job: the plan file format, version 1."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = Field(default=1, description="Format version; always 1.")
    world_size: int = Field(
        ge=1,
        le=MAX_WORLD_SIZE,
        strict=True,
        description="Number of ranks, `0 … world_size-1` (at most 1,048,576).",
    )
    groups: dict[str, list[int]] = Field(
        default_factory=dict,
        description="Named process groups as lists of global ranks. `WORLD` always exists.",
    )
    ranks: dict[int, list[Action]] = Field(
        default_factory=dict,
        description="Each rank's actions in issue order; a rank left out did nothing.",
    )
    ends: dict[int, RankEnd] = Field(
        default_factory=dict,
        description="Ranks whose trace ended early (exception, exit, time limit).",
    )
    backend: str | None = Field(
        default=None,
        description="Backend the program asked for (`nccl`, `gloo`); picks the default "
        "queue model when none is given.",
    )
    source: str | None = Field(
        default=None, description="Which front end made this trace (dryrun, generate, fr…)."
    )
    meta: dict[str, object] = Field(
        default_factory=dict, description="Free-form provenance (program, arguments, plan)."
    )
    # A symmetry certificate from the generator (`commlint.graph.symmetry`); never serialised.
    _symmetry: object | None = PrivateAttr(default=None)

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Trace:
        """A deep copy is the caller's to edit: every action in it is its own mutable
        `Action`, even where the original shares one immutable `SharedAction` between ranks
        (generated plans, and loaded plans whose ranks repeat an action)."""
        copy = super().__deepcopy__(memo)
        construct = Action.model_construct
        for rank, actions in copy.ranks.items():
            copy.ranks[rank] = [
                construct(
                    _fields_set=set(a.model_fields_set),
                    **{k: v.copy() if v.__class__ is list else v for k, v in a.__dict__.items()},
                )
                if a.__class__ is not Action
                else a
                for a in actions
            ]
        return copy

    def group_ranks(self, name: str) -> list[int]:
        """Members of a group, WORLD included."""
        if name == WORLD:
            return list(range(self.world_size))
        return self.groups[name]

    def actions(self, rank: int) -> list[Action]:
        return self.ranks.get(rank, [])

    def num_actions(self) -> int:
        count = getattr(self.ranks, "action_count", None)  # a lazy dict: without building
        if count is not None:
            return sum(count(r) for r in self.ranks)
        return sum(len(v) for v in self.ranks.values())
