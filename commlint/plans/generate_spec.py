"""The `generate:` block as data: its pydantic models (degrees, p2p style, collectives,
mutations, a schedule file), the limits on what it may expand to, and its errors located at
the block's field in the plan file.

Read by `commlint.plans.generate` (which expands it) and the stages below it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from commlint.findings import CommlintInputError

_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# What a `generate:` block may expand to: 131,072 ranks (building the layout costs about
# 5 kB per rank) and 16,777,216 actions in all (about 2 GB of checker state).
MAX_GENERATED_WORLD = 1 << 17
MAX_GENERATED_ACTIONS = 1 << 24

# ----------------------------------------------------------------------------- the spec


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Degrees(_Spec):
    """Parallel degrees. `dp` is `dp_replicate × dp_shard`; give either form."""

    tp: int = Field(default=1, ge=1, description="Tensor parallel degree.")
    cp: int = Field(default=1, ge=1, description="Context parallel degree.")
    ep: int = Field(default=1, ge=1, description="Expert parallel degree (carved out of DP).")
    etp: int | None = Field(
        default=None, ge=1, description="Expert tensor parallel degree (default: tp)."
    )
    dp: int | None = Field(default=None, ge=1, description="Data parallel degree (inferred).")
    dp_replicate: int | None = Field(default=None, ge=1, description="DDP / HSDP replicas.")
    dp_shard: int | None = Field(default=None, ge=1, description="FSDP shard degree.")
    pp: int = Field(default=1, ge=1, description="Pipeline parallel degree.")
    vpp: int = Field(default=1, ge=1, description="Virtual stages (model chunks) per rank.")


class P2P(_Spec):
    """How pipeline stages exchange activations and gradients."""

    style: Literal["megatron", "batched", "torch", "deepspeed"] = "megatron"
    order: Literal["parity", "even-sends-first", "fixed"] | None = None
    blocking: bool | None = None
    tags: Literal["none", "microbatch"] = "none"


class Collectives(_Spec):
    """Which collectives each axis issues."""

    tp: Literal["all_reduce", "sequence_parallel", "none"] = "all_reduce"
    cp: Literal["ring", "all_to_all", "none"] = "ring"
    ep: Literal["all_to_all", "none"] = "all_to_all"
    dp: Literal["all_reduce", "distributed_optimizer", "fsdp", "none"] | None = None
    embedding: bool = True
    buckets: int = Field(default=1, ge=1)
    overlap_grad_reduce: bool = False


class Activation(_Spec):
    """Payload of pipeline p2p, so the gate can compare sizes."""

    shape: list[int] = Field(min_length=1)
    dtype: str = "bfloat16"


MutationKind = Literal[
    "fixed_order",
    "head_to_head",
    "fifo_mismatch",
    "early_embedding_allreduce",
    "last_microbatch",
]


class Mutation(_Spec):
    """A deliberate mistake, to show the gate catches it."""

    kind: MutationKind
    stage: int | None = Field(default=None, ge=0)
    stages: list[int] | None = None
    microbatches: list[int] | int | None = None
    dp_rank: int | None = Field(default=None, ge=0)


class ScheduleFile(_Spec):
    """`schedule: {csv: path}` or `{csv_text: "..."}` (torch.distributed.pipelining CSV)."""

    csv: str | None = None
    csv_text: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ScheduleFile:
        if (self.csv is None) == (self.csv_text is None):
            raise ValueError("give exactly one of 'csv' (a path) or 'csv_text'")
        return self


class GenerateSpec(_Spec):
    """The `generate:` block of a plan file."""

    world_size: int | None = Field(default=None, ge=1)
    degrees: Degrees = Field(default_factory=Degrees)
    layout: Literal["megatron", "torchtitan"] = "megatron"
    order: str | None = None
    schedule: str | ScheduleFile = "1f1b"
    microbatches: int | None = Field(default=None, ge=1)
    layers: int = Field(default=1, ge=0, description="Transformer layers per virtual stage.")
    p2p: Literal["megatron", "batched", "torch", "deepspeed"] | P2P = "megatron"
    collectives: Collectives = Field(default_factory=Collectives)
    activation: Activation | None = None
    seq_lengths: list[int] | None = None
    backend: str = "nccl"
    mutations: list[Mutation | MutationKind] = Field(default_factory=list)


# ----------------------------------------------------------------------------- errors


_TYPE_ERRORS = frozenset(
    {"string_type", "dict_type", "model_type", "model_attributes_type", "int_type", "list_type"}
)
_UNION_BRANCHES = ("str", "int", "P2P", "ScheduleFile", "Mutation")


def _clean_loc(loc: tuple) -> list[str]:
    """A pydantic location without the union-branch markers it adds."""
    parts = [str(p) for p in loc]
    return [
        p for p in parts if not p.startswith(("function-", "literal[")) and p not in _UNION_BRANCHES
    ]


def _spec_error(exc: ValidationError) -> CommlintInputError:
    errors = exc.errors()
    first = _clean_loc(errors[0]["loc"])
    same = [e for e in errors if _clean_loc(e["loc"])[: len(first)] == first]
    # in a union, the branch that matched the input's shape says more than "not a string"
    err = min(same, key=lambda e: (e["type"] in _TYPE_ERRORS, -len(_clean_loc(e["loc"]))))
    loc = _clean_loc(err["loc"])
    where = "generate." + ".".join(loc) if loc else "generate"
    if err["type"] == "extra_forbidden":
        parent = _parent_model(loc[:-1])
        known = ", ".join(parent.model_fields) if parent is not None else ""
        exc = CommlintInputError(f"{where}: unknown field (expected one of: {known})")
    else:
        msg = re.sub(r"a valid dictionary or instance of \w+", "a mapping", err["msg"])
        msg = msg.removeprefix("Value error, ")
        if err["type"] == "literal_error":
            msg = f"got {err['input']!r}; expected {err['ctx']['expected']}"
        exc = CommlintInputError(f"{where}: {msg[0].lower() + msg[1:]}")
    exc.field = ".".join(loc) or None  # type: ignore[attr-defined]
    return exc


def _parent_model(path: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = GenerateSpec
    nested = {
        "degrees": Degrees,
        "p2p": P2P,
        "collectives": Collectives,
        "activation": Activation,
        "schedule": ScheduleFile,
        "mutations": Mutation,
    }
    for part in path:
        if part.isdigit():
            continue
        sub = nested.get(part)
        if sub is None:
            return None
        model = sub
    return model


def _fail(message: str, at: str | None = None) -> CommlintInputError:
    """A located error; `at` is the dotted key in the block it is about (`degrees.vpp`)."""
    exc = CommlintInputError(f"generate: {message}")
    exc.field = at  # type: ignore[attr-defined]
    return exc


def _locate(plan_path: str, field: str) -> tuple[int, int] | None:
    """(line, column) of `generate.<field>` in the plan file, or of its nearest parent."""
    try:
        root = yaml.compose(Path(plan_path).read_text(encoding="utf-8"), Loader=_YamlLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    node, found = root, None
    for part in ["generate", *field.split(".")]:
        nxt = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    nxt, found = value, key
                    break
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            nxt = found = node.value[int(part)]
        if nxt is None:
            break
        node = nxt
    if found is None:
        return None
    return found.start_mark.line + 1, found.start_mark.column + 1
