"""nnScaler plans → `Trace`: the generated `gencode{rank}.py` files, read statically, and a
gate for the execution plan before code generation.

**Generated code** (read with LibCST, never imported or run). Per rank file:

- `class GenModel(nnscaler.runtime.module.ParallelModule)` with `rank = N`;
- `__init__`: `self.init_group(ranks=[...])` per group, weight reducers
  `self.wreducerN = nnscaler.runtime.adapter.Reducer(ranks=[...], ...)` registered in order by
  `self.add_reducer(self.wreducerN)`;
- methods `segmentN` / `adapterN` whose communication is calls to
  `nnscaler.runtime.adapter.*`: `move(t, shape=…, dtype=…, src=a, dst=b, async_op=…)` is a send
  on `src` and a receive on `dst`; `all_reduce/all_gather/reduce_scatter/all_to_all/broadcast
  (…, ranks=[…])` are collectives; `rdscatter/rdgather` are one-to-many p2p; the autograd pairs
  in `nnscaler.runtime.adapter.nn` are named `<forward>_<backward>` (`allreduce_identity`,
  `identity_allreduce`, `allgather_split`, `split_allgather`, `reducescatter_allgather`,
  `alltoall_alltoall`, …): their first half runs in the forward, the second in the backward;
- the step: `_train_step(model, dataloader)` (end-to-end mode), an ordered list of
  `nnscaler.runtime.executor.fexecute('segmentN', model.segmentN, …)`,
  `aexecute(model.adapterN, …)` and `backward('segmentN', …)` calls; a backward replays the
  segment's backward halves in reverse order. Without `_train_step`, the step is
  `_forward_impl`'s calls, then every backward half in reverse. Weight reducers
  (`self.wreducerN.sync_grads()`, an all-reduce on the reducer's ranks) run after the step in
  registration order.

Each action's `site` is the line of the communication call in `gencode{rank}.py`; its stack
names the `_train_step` line that ran it.

**Gate hook** (`gate_execution_plan`): nnScaler's execution plan (duck-typed; nnScaler need not
be installed) → a trace per device from `execplan.seq(device)`, checked; raises
`PlanRejected` when the plan would hang. Call it after the plan exists and before
`ModuleCodeGen` writes code (`install_codegen_gate` wraps the class for you).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from commlint.findings import CommlintInputError, Finding
from commlint.isolate import IsolatedError, IsolatedFailure, call_isolated
from commlint.plans.gate import numbers_located, read_text
from commlint.plans.importers.common import validated
from commlint.trace import WORLD, Action, Trace

ADAPTER = "nnscaler.runtime.adapter."
EXECUTOR = "nnscaler.runtime.executor."
_GENCODE = re.compile(r"^gencode(\d+)\.py$")

# runtime collective → trace op
COLLECTIVES = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "alltoall": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "rvscatter": "broadcast",
    "rvgather": "reduce",
}
# halves of the autograd pairs in nnscaler.runtime.adapter.nn that do not communicate
LOCAL = {"identity", "split", "chunk", "none"}
NO_COMM = {"chunk", "Reducer"}


@dataclass
class Comm:
    """One communication a call performs on this rank (before rank-specific lowering)."""

    op: str  # trace op, or "move" / "rdscatter" / "rdgather"
    line: int
    ranks: list[int] | None = None
    src: int | None = None
    dst: int | None = None
    srcs: list[int] | None = None
    dsts: list[int] | None = None
    is_async: bool = False
    shape: list[int] | None = None
    dtype: str | None = None
    label: str = ""


@dataclass
class Method:
    forward: list[Comm] = field(default_factory=list)
    backward: list[Comm] = field(default_factory=list)  # in forward order; replayed reversed
    calls: list[tuple[str, int]] = field(default_factory=list)  # self.<method>() in order


@dataclass
class StepCall:
    kind: str  # fexecute / aexecute / backward
    method: str
    line: int


@dataclass
class GenCode:
    """What one `gencode{rank}.py` says about communication."""

    path: str
    rank: int
    world_size: int | None = None
    groups: list[list[int]] = field(default_factory=list)
    reducers: dict[str, list[int]] = field(default_factory=dict)
    reducer_order: list[str] = field(default_factory=list)
    reducer_lines: dict[str, int] = field(default_factory=dict)
    # reducers the code uses (`add_reducer`, `.sync_grads()`), with the line of the use
    reducer_uses: list[tuple[str, int]] = field(default_factory=list)
    methods: dict[str, Method] = field(default_factory=dict)
    step: list[StepCall] | None = None


def _dotted(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def _literal(node: cst.BaseExpression) -> Any:
    """Ints, lists/tuples of ints, bools, None, strings, `torch.float32`; else a marker."""
    if isinstance(node, cst.Integer):  # `0x1f`, `1_000` too; a rank has at most 20 digits
        text = node.value.replace("_", "")
        return int(text, 0) if len(text) <= 20 else _UNKNOWN
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _literal(node.expression)
        return -inner if isinstance(inner, int) else _UNKNOWN
    if isinstance(node, (cst.List, cst.Tuple)):
        out = [_literal(e.value) for e in node.elements]
        return _UNKNOWN if any(v is _UNKNOWN for v in out) else out
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    name = _dotted(node)
    if name and name.startswith("torch."):
        return name.removeprefix("torch.")
    return _UNKNOWN


class _Unknown:
    def __repr__(self) -> str:
        return "<not a literal>"


_UNKNOWN = _Unknown()


def _kwargs(call: cst.Call) -> dict[str, Any]:
    return {a.keyword.value: _literal(a.value) for a in call.args if a.keyword is not None}


class _Reader(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, gen: GenCode) -> None:
        self.gen = gen
        self.method: str | None = None
        self.in_class = 0
        self.in_step = False
        self.errors: list[tuple[int, str]] = []

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.in_class += 1
        for stmt in node.body.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Assign) and len(small.targets) == 1:
                        target = _dotted(small.targets[0].target)
                        value = _literal(small.value)
                        if target == "world_size" and isinstance(value, int):
                            self.gen.world_size = value
                        if target == "rank" and isinstance(value, int):
                            self.gen.rank = value

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.in_class -= 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        name = node.name.value
        if self.in_class and self.method is None:
            self.method = name
            self.gen.methods.setdefault(name, Method())
        elif not self.in_class and name == "_train_step":
            self.in_step = True
            self.gen.step = []

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if self.in_class and self.method == original_node.name.value:
            self.method = None
        elif original_node.name.value == "_train_step":
            self.in_step = False

    def visit_Call(self, node: cst.Call) -> None:
        name = _dotted(node.func) or ""
        line = self._line(node)
        if self.in_step and name.startswith(EXECUTOR):
            self._step_call(name.removeprefix(EXECUTOR), node, line)
            return
        if self.method is None:
            return
        method = self.gen.methods[self.method]
        if name == "self.init_group":
            ranks = _kwargs(node).get("ranks")
            if ranks is None and node.args:
                ranks = _literal(node.args[0].value)
            if isinstance(ranks, list):
                self.gen.groups.append(sorted(ranks))
            return
        if name == "self.add_reducer" and node.args:
            reducer = (_dotted(node.args[0].value) or "").removeprefix("self.")
            self.gen.reducer_order.append(reducer)
            self.gen.reducer_uses.append((reducer, line))
            return
        if name.startswith("self.") and name.count(".") == 1:
            method.calls.append((name.removeprefix("self."), line))
            return
        if name.startswith("self.") and name.endswith(".sync_grads"):
            reducer = name.removeprefix("self.").removesuffix(".sync_grads")
            method.calls.append((reducer, line))
            self.gen.reducer_uses.append((reducer, line))
            return
        if name.startswith(ADAPTER):
            self._adapter_call(name.removeprefix(ADAPTER), node, line, method)

    def visit_Assign(self, node: cst.Assign) -> None:
        if self.method != "__init__" or not isinstance(node.value, cst.Call):
            return
        if (_dotted(node.value.func) or "").endswith("adapter.Reducer"):
            target = _dotted(node.targets[0].target) or ""
            ranks = _kwargs(node.value).get("ranks")
            if isinstance(ranks, list):
                self.gen.reducers[target.removeprefix("self.")] = sorted(ranks)
                self.gen.reducer_lines[target.removeprefix("self.")] = self._line(node)
            else:
                self.errors.append((self._line(node), "Reducer without literal ranks=[...]"))

    def _step_call(self, fn: str, node: cst.Call, line: int) -> None:
        assert self.gen.step is not None
        args = [a for a in node.args if a.keyword is None and a.star == ""]
        if fn == "fexecute" and len(args) >= 2:
            target = _dotted(args[1].value) or ""
            self.gen.step.append(StepCall("fexecute", target.removeprefix("model."), line))
        elif fn == "aexecute" and args:
            target = _dotted(args[0].value) or ""
            self.gen.step.append(StepCall("aexecute", target.removeprefix("model."), line))
        elif fn in ("backward", "backward_input") and args:
            seg = _literal(args[0].value)
            if isinstance(seg, str):
                self.gen.step.append(StepCall("backward", seg, line))

    def _adapter_call(self, fn: str, node: cst.Call, line: int, method: Method) -> None:
        kw = _kwargs(node)
        pos = [_literal(a.value) for a in node.args if a.keyword is None]
        is_async = kw.get("async_op") is True
        label = f"nnscaler.runtime.adapter.{fn}"
        if fn.startswith("nn."):
            pair = fn.removeprefix("nn.")
            halves = self._split_pair(pair)
            if halves is None:
                self.errors.append((line, f"unknown nnScaler autograd adapter {fn!r}"))
                return
            ranks = self._ranks(kw, line, fn)
            if ranks is None:
                return
            fwd, bwd = halves
            if fwd not in LOCAL:
                method.forward.append(Comm(COLLECTIVES[fwd], line, ranks=ranks, label=label))
            if bwd not in LOCAL:
                method.backward.append(
                    Comm(COLLECTIVES[bwd], line, ranks=ranks, label=f"{label} (backward)")
                )
            return
        if fn in NO_COMM:
            return
        if fn == "move":
            src = kw.get("src", pos[3] if len(pos) > 3 else None)
            dst = kw.get("dst", pos[4] if len(pos) > 4 else None)
            if not isinstance(src, int) or not isinstance(dst, int):
                self.errors.append((line, "move() without literal src/dst"))
                return
            shape = kw.get("shape", pos[1] if len(pos) > 1 else None)
            dtype = kw.get("dtype", pos[2] if len(pos) > 2 else None)
            method.forward.append(
                Comm(
                    "move",
                    line,
                    src=src,
                    dst=dst,
                    is_async=is_async,
                    shape=list(shape) if isinstance(shape, list) else None,
                    dtype=dtype if isinstance(dtype, str) else None,
                    label=label,
                )
            )
            return
        if fn in ("rdscatter", "rdgather"):
            comm = Comm(fn, line, is_async=is_async, label=label)
            comm.src, comm.dst = kw.get("src"), kw.get("dst")
            comm.srcs, comm.dsts = kw.get("srcs"), kw.get("dsts")
            method.forward.append(comm)
            return
        if fn in COLLECTIVES:
            ranks = self._ranks(kw, line, fn, pos)
            if ranks is None:
                return
            comm = Comm(COLLECTIVES[fn], line, ranks=ranks, is_async=is_async, label=label)
            if fn == "broadcast":
                comm.src = kw.get("src")
            elif fn in ("rvscatter",):
                comm.src = kw.get("src")
                comm.ranks = sorted({*ranks, kw.get("src")} - {None})
            elif fn == "rvgather":
                comm.src = kw.get("dst")
                comm.ranks = sorted({*ranks, kw.get("dst")} - {None})
            method.forward.append(comm)
            return
        self.errors.append((line, f"unknown nnScaler adapter function {fn!r}"))

    def _ranks(self, kw: dict, line: int, fn: str, pos: list | None = None) -> list[int] | None:
        ranks = kw.get("ranks")
        if ranks is None and fn in ("rvscatter", "rvgather"):
            ranks = kw.get("dsts") or kw.get("srcs")
        if ranks is None and pos:
            ranks = next((p for p in reversed(pos) if isinstance(p, list)), None)
        if not isinstance(ranks, list) or not all(isinstance(r, int) for r in ranks):
            self.errors.append((line, f"{fn}() without literal ranks=[...]"))
            return None
        return list(ranks)

    @staticmethod
    def _split_pair(pair: str) -> tuple[str, str] | None:
        known = {*COLLECTIVES, *LOCAL}
        for i in range(1, len(pair)):
            if pair[i] == "_" and pair[:i] in known and pair[i + 1 :] in known:
                return pair[:i], pair[i + 1 :]
        return None


# Syntax trees deeper than this are parsed by LibCST in a child process: its native parser
# recurses, and a crash there must cost this input only (as the linter's engine does).
RISKY_DEPTH = 100


def read_gencode(path: str | Path, rank: int | None = None) -> GenCode:
    """Parse one `gencode{rank}.py` (never imported).

    Read through the input gate (a regular file of bounded size); checked first by CPython's
    own parser, which refuses what would crash LibCST's native one (3,000 nested parentheses,
    a 10⁵-term expression) with a located error; a file that nests deeper than `RISKY_DEPTH`
    is parsed in a child process."""
    name = str(path)
    text = read_text(path, what="a gencode file")
    depth = _precheck(text, name)
    m = _GENCODE.match(Path(path).name)
    rank = rank if rank is not None else int(m.group(1)) if m else 0
    if depth <= RISKY_DEPTH:
        return _parse_gencode((text, name, rank))
    try:
        return call_isolated(__name__, "_parse_gencode", (text, name, rank))
    except IsolatedError as exc:
        state = exc.state if isinstance(exc.state, tuple) else (f"{exc.kind}: {exc.state}",)
        raise CommlintInputError(state[0], name, *state[2:3]) from None
    except IsolatedFailure as exc:
        raise CommlintInputError(f"not read: {exc}", name) from None


def _precheck(text: str, name: str) -> int:
    """The syntax tree's depth by CPython's parser; its refusals become located errors."""
    try:
        tree = ast.parse(text, name)
    except SyntaxError as exc:
        raise CommlintInputError(f"invalid Python: {exc.msg}", name, exc.lineno) from None
    except (RecursionError, MemoryError):
        raise CommlintInputError(
            "too deeply nested to read (Python's own parser gives up)", name
        ) from None
    deepest = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _parse_gencode(job: tuple[str, str, int]) -> GenCode:
    text, name, rank = job
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise CommlintInputError(f"invalid Python: {exc.message}", name, exc.raw_line) from None
    except RecursionError:
        raise CommlintInputError("too deeply nested to read", name) from None
    gen = GenCode(name, rank)
    reader = _Reader(gen)
    try:
        MetadataWrapper(module).visit(reader)
    except RecursionError:
        raise CommlintInputError("too deeply nested to read", name) from None
    if reader.errors:
        line, msg = reader.errors[0]
        raise CommlintInputError(msg, name, line)
    for reducer, line in gen.reducer_uses:
        if reducer not in gen.reducers:
            # nnScaler's runtime raises AttributeError here; the trace would lose its all-reduce
            raise CommlintInputError(
                f"uses reducer '{reducer}', which __init__ never creates (no `self.{reducer} "
                "= nnscaler.runtime.adapter.Reducer(ranks=[...])`)",
                name,
                line,
            )
    return gen


def _group_name(ranks: list[int], world: int) -> str:
    if ranks == list(range(world)):
        return WORLD
    return "ranks" + "_".join(map(str, ranks))


class _Lowering:
    """GenCode of one rank → its actions."""

    def __init__(self, gen: GenCode, world: int, groups: dict[str, list[int]]) -> None:
        self.gen, self.world, self.groups = gen, world, groups
        self.actions: list[Action] = []
        self.pending: list[str] = []  # async receives waited at the next segment call
        self.sends: list[str] = []  # async sends nnScaler never waits for
        self.n = 0

    def site(self, line: int | None) -> str | None:
        return f"{self.gen.path}:{line}" if line else None

    def group(self, ranks: list[int]) -> str:
        name = _group_name(sorted(ranks), self.world)
        if name != WORLD:
            self.groups.setdefault(name, sorted(ranks))
        return name

    def flush(self, line: int | None = None) -> None:
        if self.pending:
            site = self.site(line) if line else None
            self.actions.append(Action(op="wait", handles=self.pending, label="consume", site=site))
            self.pending = []

    def emit(self, c: Comm, stack: list[str]) -> None:
        rank = self.gen.rank
        site = self.site(c.line)
        common = {"site": site, "stack": stack or None, "label": c.label}
        if c.op == "move":
            if rank == c.src:
                self._p2p("send", c.dst, c, common)
            elif rank == c.dst:
                self._p2p("recv", c.src, c, common)
            return
        if c.op == "rdscatter":
            if rank == c.src:
                for d in c.dsts or []:
                    self._p2p("send", d, c, common)
            elif rank in (c.dsts or []):
                self._p2p("recv", c.src, c, common)
            return
        if c.op == "rdgather":
            if rank == c.dst:
                for s in c.srcs or []:
                    self._p2p("recv", s, c, common)
            elif rank in (c.srcs or []):
                self._p2p("send", c.dst, c, common)
            return
        group = self.group(c.ranks or [])
        root = c.src if c.op in ("broadcast", "reduce") else None
        if c.is_async:
            self.n += 1
            h = f"c{self.n}"
            self.actions.append(
                Action(op=c.op, group=group, root=root, is_async=True, handle=h, **common)
            )
            self.pending.append(h)
        else:
            self.actions.append(Action(op=c.op, group=group, root=root, **common))

    def _p2p(self, op: str, peer: int | None, c: Comm, common: dict) -> None:
        if peer is None:
            return
        payload = {"shape": c.shape, "dtype": c.dtype}
        if not c.is_async:
            self.actions.append(Action(op=op, peer=peer, **payload, **common))
            return
        self.n += 1
        h = f"p{self.n}"
        self.actions.append(Action(op="i" + op, peer=peer, handle=h, **payload, **common))
        (self.sends if op == "send" else self.pending).append(h)

    def run_method(self, name: str, direction: str, stack: list[str], depth: int = 0) -> None:
        method = self.gen.methods.get(name)
        if method is None:
            if name in self.gen.reducers:
                self.reducer(name, stack)
                return
            raise CommlintInputError(
                f"calls {name}, which this file does not define", self.gen.path
            )
        if direction == "forward":
            for c in method.forward:
                self.emit(c, stack)
            if depth < 8:
                for callee, line in method.calls:
                    if callee in self.gen.methods or callee in self.gen.reducers:
                        self.run_method(callee, "forward", [self.site(line), *stack], depth + 1)
        else:
            for c in reversed(method.backward):
                self.emit(c, stack)

    def reducer(self, name: str, stack: list[str]) -> None:
        ranks = self.gen.reducers[name]
        if self.gen.rank in ranks and len(ranks) > 1:
            self.actions.append(
                Action(
                    op="all_reduce",
                    group=self.group(ranks),
                    site=self.site(self.gen.reducer_lines.get(name)),
                    stack=stack or None,
                    label=f"{name}.sync_grads()",
                )
            )


def _order_forward_impl(gen: GenCode) -> list[StepCall]:
    impl = gen.methods.get("_forward_impl") or gen.methods.get("forward")
    if impl is None:
        return []
    return [StepCall("call", name, line) for name, line in impl.calls]


def gencodes_to_trace(gens: Sequence[GenCode], path: str | None = None) -> Trace:
    """Parsed gencode files (one per rank) → one trace."""
    by_rank: dict[int, GenCode] = {}
    for g in gens:
        if g.rank in by_rank:
            raise CommlintInputError(
                f"two files for rank {g.rank}: {by_rank[g.rank].path} and {g.path}", path
            )
        by_rank[g.rank] = g
    declared = [g.world_size for g in gens if g.world_size]
    world = max([len(by_rank), max(by_rank) + 1, *declared])
    groups: dict[str, list[int]] = {}
    ranks: dict[int, list[Action]] = {}
    for rank, gen in sorted(by_rank.items()):
        low = _Lowering(gen, world, groups)
        for ranks_ in gen.groups:
            low.group(ranks_)
        if gen.step is not None:
            for call in gen.step:
                stack = [f"{gen.path}:{call.line} in _train_step"]
                if call.kind in ("fexecute", "backward"):
                    low.flush(call.line)
                low.run_method(
                    call.method, "backward" if call.kind == "backward" else "forward", stack
                )
        else:
            calls = _order_forward_impl(gen)
            for call in calls:
                low.flush(call.line)
                low.run_method(call.method, "forward", [f"{gen.path}:{call.line} in forward"])
            for call in reversed(calls):
                low.run_method(call.method, "backward", [f"{gen.path}:{call.line} (backward)"])
        low.flush()
        for name in gen.reducer_order or list(gen.reducers):
            low.reducer(name, ["after the step (ParallelModule.sync_grad)"])
        if low.sends:
            low.actions.append(
                Action(
                    op="wait",
                    handles=low.sends,
                    label="end of step (nnScaler never waits its isends; they drain here)",
                )
            )
        ranks[rank] = low.actions
    return Trace(
        world_size=world,
        groups=groups,
        ranks=ranks,
        source="nnscaler",
        backend="nccl",
        meta={"nnscaler": {"files": {str(r): g.path for r, g in sorted(by_rank.items())}}},
    )


def load_nnscaler(path: str | Path) -> Trace:
    """Read a folder of `gencode{rank}.py` files (or one of them) into a `Trace`."""
    root = Path(path)
    if root.is_dir():
        files = sorted(
            (f for f in root.iterdir() if _GENCODE.match(f.name)),  # FIFOs too: refused below
            key=lambda f: int(_GENCODE.match(f.name).group(1)),
        )
        if not files:
            raise CommlintInputError("no gencode{rank}.py files in this folder", str(root))
    elif root.is_file():
        files = [root]
    else:
        raise CommlintInputError("no such file or directory", str(root))
    gens = []
    for f in files:
        with numbers_located(str(f), "an nnScaler gencode file"):
            gens.append(read_gencode(f))
    with numbers_located(str(root), "an nnScaler plan"):
        trace = gencodes_to_trace(gens, str(root))
    return validated(trace, str(root), {g.rank: g.path for g in gens})


# --- gate hook on the execution plan ---------------------------------------------------------


class PlanRejected(RuntimeError):
    """Raised by the gate: the plan hangs or mismatches. `findings` says where and why."""

    def __init__(self, findings: list[Finding], trace: Trace) -> None:
        self.findings = findings
        self.trace = trace
        lines = [f"{f.code} {f.message}" for f in findings[:5]]
        more = f"\n… and {len(findings) - 5} more" if len(findings) > 5 else ""
        super().__init__(
            "commlint rejected the nnScaler plan before code generation:\n"
            + "\n".join(lines)
            + more
        )


def _cells(cell: Any) -> Iterable[Any]:
    """Flatten ExeReuseCell wrappers and segments to the cells that communicate."""
    inner = getattr(cell, "cell", None)
    if inner is not None and not hasattr(cell, "prims"):
        yield from _cells(inner)
        return
    if hasattr(cell, "prims"):
        yield cell
        return
    if "Reducer" in type(cell).__name__:
        yield cell
        return
    nodes = getattr(cell, "nodes", None)
    if callable(nodes):
        for node in nodes():
            yield from _cells(node)


def _prim_comm(prim: Any) -> Comm | None:
    signature = str(getattr(prim, "signature", "") or "")
    kwargs = dict(getattr(prim, "kwargs", {}) or {})
    fn = signature.rsplit(".", 1)[-1]
    kind = type(prim).__name__
    label = signature or kind
    if kind == "MovePrim" or fn == "move":
        src, dst = kwargs.get("src"), kwargs.get("dst")
        return Comm("move", 0, src=src, dst=dst, is_async=bool(kwargs.get("async_op")), label=label)
    if kind in ("RDScatterPrim",) or fn == "rdscatter":
        return Comm(
            "rdscatter", 0, src=kwargs.get("src"), dsts=list(kwargs.get("dsts", [])), label=label
        )
    if kind in ("RDGatherPrim",) or fn == "rdgather":
        return Comm(
            "rdgather", 0, dst=kwargs.get("dst"), srcs=list(kwargs.get("srcs", [])), label=label
        )
    name = (
        fn
        if fn in COLLECTIVES
        else re.sub(r"(?<!^)(?=[A-Z])", "_", kind.removesuffix("Prim")).lower()
    )
    if name in COLLECTIVES:
        ranks = list(kwargs.get("ranks", []))
        return Comm(COLLECTIVES[name], 0, ranks=ranks, src=kwargs.get("src"), label=label)
    return None


def plan_to_trace(execplan: Any, devices: Iterable[int] | None = None) -> Trace:
    """An nnScaler `ExecutionPlan` (duck-typed) → `Trace`, one rank per device.

    Uses `execplan.seq(device)` and, when `devices` is not given, `execplan.graph.device`
    or `execplan.devices()`. Adapters contribute their `prims` (`MovePrim` src/dst, collectives
    with `kwargs['ranks']`); weight reducers an all-reduce on `reducer.device`.
    """
    if devices is None:
        getter = getattr(execplan, "devices", None)
        devs = (
            getter()
            if callable(getter)
            else getattr(getattr(execplan, "graph", None), "device", None)
        )
        devices = devs or []
    devices = sorted(int(d) for d in devices)
    if not devices:
        raise ValueError("no devices: pass devices= or a plan with .devices()")
    world = max(devices) + 1
    groups: dict[str, list[int]] = {}
    ranks: dict[int, list[Action]] = {}
    for dev in devices:
        low = _Lowering(GenCode(path="<execplan>", rank=dev), world, groups)
        for k, cell in enumerate(execplan.seq(dev)):
            name = getattr(cell, "name", None) or type(cell).__name__
            stack = [f"seq({dev})[{k}] {type(cell).__name__} {name}"]
            for sub in _cells(cell):
                if "Reducer" in type(sub).__name__ and not hasattr(sub, "prims"):
                    members = sorted(int(d) for d in getattr(sub, "device", []))
                    if dev in members and len(members) > 1:
                        low.actions.append(
                            Action(
                                op="all_reduce",
                                group=low.group(members),
                                stack=stack,
                                label=f"{type(sub).__name__} sync_grads",
                            )
                        )
                    continue
                low.flush()
                for prim in getattr(sub, "prims", []):
                    comm = _prim_comm(prim)
                    if comm is not None:
                        low.emit(comm, stack)
        low.flush()
        if low.sends:
            low.actions.append(Action(op="wait", handles=low.sends, label="end of step"))
        ranks[dev] = low.actions
    trace = Trace(
        world_size=world, groups=groups, ranks=ranks, source="nnscaler-execplan", backend="nccl"
    )
    return validated(trace, "<execplan>")


def gate_execution_plan(
    execplan: Any,
    devices: Iterable[int] | None = None,
    *,
    model: str | list[str] | None = "nccl",
    fail_on: Callable[[Finding], bool] | None = None,
) -> Trace:
    """Check an nnScaler execution plan; raise `PlanRejected` if it would hang.

    `fail_on` picks the findings that reject the plan (default: every error). Returns the
    trace when the plan passes, so a search loop can keep it.
    """
    from commlint.graph.check import check_trace

    trace = plan_to_trace(execplan, devices)
    result = check_trace(trace, model)
    pick = fail_on or (lambda f: f.severity == "error")
    bad = [f for f in result.findings if pick(f)]
    if bad:
        raise PlanRejected(bad, trace)
    return trace


def install_codegen_gate(codegen_cls: Any, **gate_options: Any) -> Callable[[], None]:
    """Wrap `ModuleCodeGen.__init__(self, execplan, ...)` so every plan is gated before any
    code is written. Returns a function that removes the wrapper.

        from nnscaler.codegen import ModuleCodeGen
        uninstall = install_codegen_gate(ModuleCodeGen)
    """
    original = codegen_cls.__init__

    def __init__(self: Any, execplan: Any, *args: Any, **kwargs: Any) -> None:
        gate_execution_plan(execplan, **gate_options)
        original(self, execplan, *args, **kwargs)

    codegen_cls.__init__ = __init__

    def uninstall() -> None:
        codegen_cls.__init__ = original

    return uninstall
