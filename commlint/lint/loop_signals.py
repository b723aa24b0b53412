"""Hooks that stop a framework's training loop on some ranks only.

Lightning's `Trainer.fit` and transformers' `Trainer.train` run the training loop themselves;
every step communicates (DDP/FSDP/DeepSpeed reduce the gradients in backward). A hook of the
user's leaves that loop by a signal the framework reads as set, on the rank that set it
(`api_table.yaml`, `loop_signals`): `self.trainer.should_stop = True`,
`control.should_training_stop = True`, `return -1` from a LightningModule's
`on_train_batch_start`. Given under a test of the rank (`state.is_world_process_zero`) or of
this rank's own data (a validation loss averaged over the rank's shard, a count of what the
rank's batches held), those ranks leave while the others wait in the next step's gradient
reduction: a hang. The loop is the framework's, so neither the taint rules nor the per-rank
evaluator see a collective after the exit; this module names the exit itself.

A test counts as rank-local only when the source says so, flow by flow in the hook's class:
a rank helper or attribute of the table; a value computed from the hook's `batch`/`outputs`
(or `.item()` of a tensor); an attribute of the object that some method of its class sets from
such a value (`self.positives_seen += int(y.sum())` in `training_step`). A value that went
through a call that agrees across ranks (`strategy.reduce`, `all_gather`, `dist.all_reduce(v)`)
is uniform again; anything else (a config, `batch_idx`, `state.global_step`, the evaluation
`metrics` transformers gathers over every rank) is taken as uniform: never reported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from commlint.lint.analyze import RawFinding
from commlint.lint.ir import Pos

BATCH_PARAMS = frozenset({"batch", "outputs", "inputs", "sample", "samples"})
SIZES = frozenset({"len", "size", "numel", "dim", "shape", "ndim", "dtype", "device"})


@dataclass(frozen=True)
class Signal:
    """One way a hook stops the framework's loop (one row of `loop_signals`)."""

    framework: str
    attribute: str | None = None  # `X.<attribute> = <value>`
    hook: str | None = None  # `return <value>` from this method ...
    base: str | None = None  # ... of a subclass of this (last name) class
    value: object = True


def signals_of(rows: list[dict]) -> tuple[Signal, ...]:
    """The table's `loop_signals` rows."""
    out = []
    for r in rows:
        base = r.get("base")
        out.append(
            Signal(
                framework=str(r["framework"]),
                attribute=r.get("attribute"),
                hook=r.get("hook_return"),
                base=base.rsplit(".", 1)[-1] if base else None,
                value=r.get("value", True),
            )
        )
    return tuple(out)


def _dotted(e: ast.AST) -> str:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        inner = _dotted(e.value)
        return f"{inner}.{e.attr}" if inner else ""
    if isinstance(e, ast.Call):
        return _dotted(e.func)
    return ""


class _Taint:
    """Which names and attributes hold this rank's own value, in one class."""

    def __init__(self, table, agreeing: frozenset[str]) -> None:
        self.table = table
        self.agreeing = agreeing
        self.local_attrs: dict[str, str] = {}  # attribute -> why it is rank-local

    def why(self, e: ast.AST, names: dict[str, str]) -> str | None:
        """Why `e` differs between ranks, or None when nothing says it does."""
        if isinstance(e, ast.Call):
            last = _dotted(e.func).rsplit(".", 1)[-1]
            if last in self.agreeing or last in SIZES:
                # the ranks agree on what it returns; sizes are alike under the framework's
                # DistributedSampler, which pads every rank's shard to one length
                return None
            if last in self.table.rank_helpers or _dotted(e.func).endswith("dist.get_rank"):
                return f"`{ast.unparse(e)[:40]}` is the rank"
            if last in self.table.data_methods and isinstance(e.func, ast.Attribute):
                inner = self.why(e.func.value, names)
                return inner or f"`{ast.unparse(e)[:40]}` reads this rank's tensor"
        if isinstance(e, ast.Name) and e.id in names:
            return names[e.id]
        if isinstance(e, ast.Attribute):
            if e.attr in SIZES:
                return None
            if e.attr in self.table.rank_attributes:
                return f"`{ast.unparse(e)[:40]}` is the rank"
            if isinstance(e.value, ast.Name) and e.value.id == "self":
                return self.local_attrs.get(e.attr)
        for child in ast.iter_child_nodes(e):
            if isinstance(child, ast.expr):
                got = self.why(child, names)
                if got:
                    return got
        return None

    def method_names(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
        names = {
            a.arg: f"`{a.arg}` is this rank's batch"
            for a in fn.args.args + fn.args.kwonlyargs
            if a.arg in BATCH_PARAMS
        }
        return names

    def learn_attrs(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """Attributes this method sets from a rank-local value; True when one is new."""
        names = self.method_names(fn)
        grew = False
        for s in _statements(fn.body):
            targets: list[ast.AST] = []
            value: ast.AST | None = None
            if isinstance(s, ast.Assign):
                targets, value = s.targets, s.value
            elif isinstance(s, ast.AugAssign | ast.AnnAssign) and s.value is not None:
                targets, value = [s.target], s.value
            elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
                f = s.value.func
                if isinstance(f, ast.Attribute) and f.attr in ("append", "extend", "add"):
                    targets = [f.value]
                    value = s.value.args[0] if s.value.args else None
            if value is None:
                continue
            why = self.why(value, names)
            for t in _unpacked(targets):
                if isinstance(t, ast.Name):
                    if why:
                        names[t.id] = why
                    elif isinstance(s, ast.Assign | ast.AnnAssign):
                        names.pop(t.id, None)
                elif (
                    why
                    and isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and t.attr not in self.local_attrs
                ):
                    self.local_attrs[t.attr] = f"`self.{t.attr}` is set from {why.split(' is ')[0]}"
                    grew = True
        return grew


def _unpacked(targets: list) -> list:
    """`x, y = batch`: each name of a tuple target."""
    out = []
    for t in targets:
        if isinstance(t, ast.Tuple | ast.List):
            out.extend(_unpacked(list(t.elts)))
        elif isinstance(t, ast.Starred):
            out.extend(_unpacked([t.value]))
        else:
            out.append(t)
    return out


def _statements(body: list[ast.stmt]):
    """The statements of a block and of the blocks inside it, in source order (not into
    nested functions or classes)."""
    for s in body:
        yield s
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for field_name in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(s, field_name, None)
            if isinstance(inner, list):
                yield from _statements([x for x in inner if isinstance(x, ast.stmt)])
                for h in inner:
                    if isinstance(h, ast.ExceptHandler):
                        yield from _statements(h.body)


def _is_signal(s: ast.stmt, sig: Signal, fn_name: str, cls_bases: set[str]) -> bool:
    if sig.attribute is not None and isinstance(s, ast.Assign):
        return (
            isinstance(s.value, ast.Constant)
            and s.value.value == sig.value
            and any(isinstance(t, ast.Attribute) and t.attr == sig.attribute for t in s.targets)
        )
    if sig.hook is not None and isinstance(s, ast.Return) and fn_name == sig.hook:
        v = s.value
        if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.USub):
            v = ast.Constant(-v.operand.value) if isinstance(v.operand, ast.Constant) else v
        return isinstance(v, ast.Constant) and v.value == sig.value and sig.base in cls_bases
    return False


def _bases(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> set[str]:
    """The last names of a class's bases, through the file's own classes."""
    out: set[str] = set()
    todo = list(cls.bases)
    while todo:
        b = todo.pop()
        name = _dotted(b).rsplit(".", 1)[-1]
        if name and name not in out:
            out.add(name)
            if name in classes:
                todo.extend(classes[name].bases)
    return out


def program_findings(program) -> list[RawFinding]:
    """CL103 findings of the hooks of every file of the run."""
    table = program.table
    signals = signals_of(list(table.loop_signals))
    if not signals:
        return []
    out: list[RawFinding] = []
    for ff in program.files:
        try:
            with open(ff.path, encoding="utf-8-sig") as fh:
                source = fh.read()
        except (OSError, UnicodeDecodeError):
            continue  # standard input, or a file gone since: its other findings stand
        out.extend(findings(ff.path, source, table, signals, table.agreeing_calls))
    return out


def findings(path: str, source: str, table, signals, agreeing: frozenset[str]) -> list:
    """CL103 findings of one file's hooks."""
    words = {s.attribute or s.hook for s in signals}
    if not any(w and w in source for w in words):
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    classes = {c.name: c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
    out: list[RawFinding] = []
    for cls in classes.values():
        methods = [m for m in cls.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
        taint = _Taint(table, agreeing)
        for _ in range(4):  # attributes set from attributes: a few rounds reach the fixpoint
            if not any([taint.learn_attrs(m) for m in methods]):
                break
        bases = _bases(cls, classes)
        for m in methods:
            out.extend(_method_findings(path, m, taint, signals, bases))
    return out


def _method_findings(path, fn, taint: _Taint, signals, bases: set[str]) -> list[RawFinding]:
    out: list[tuple[RawFinding, str | None]] = []
    names = taint.method_names(fn)

    def walk(body: list[ast.stmt], cond: tuple[ast.expr, str] | None) -> None:
        for s in body:
            if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if isinstance(s, ast.Assign | ast.AnnAssign | ast.AugAssign) and s.value is not None:
                why = taint.why(s.value, names)
                for t in _unpacked(s.targets if isinstance(s, ast.Assign) else [s.target]):
                    if isinstance(t, ast.Name):
                        if why:
                            names[t.id] = why
                        elif not isinstance(s, ast.AugAssign):
                            names.pop(t.id, None)
            elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
                # `dist.all_reduce(avg)`: the ranks agree on `avg` from here on
                f = s.value.func
                if _dotted(f).rsplit(".", 1)[-1] in taint.agreeing:
                    for a in s.value.args[:1]:
                        if isinstance(a, ast.Name):
                            names.pop(a.id, None)
            if cond is not None:
                for sig in signals:
                    if _is_signal(s, sig, fn.name, bases):
                        out.append((_finding(path, s, cond, sig), sig.attribute))
            if isinstance(s, ast.If):
                why = taint.why(s.test, names)
                inner = (s.test, why) if why else cond
                walk(s.body, inner)
                walk(s.orelse, inner)
            elif isinstance(s, ast.For | ast.While | ast.With | ast.Try):
                walk(s.body, cond)
                walk(getattr(s, "orelse", []), cond)
                for h in getattr(s, "handlers", []):
                    walk(h.body, cond)
                walk(getattr(s, "finalbody", []), cond)

    walk(fn.body, None)
    # `trainer.should_stop = trainer.strategy.broadcast(trainer.should_stop)` further down
    # (Lightning's own LR finder): the ranks agree on the signal before the loop reads it
    agreed = [
        (s.lineno, t.attr)
        for s in _statements(fn.body)
        if isinstance(s, ast.Assign) and _agrees(s.value, taint.agreeing)
        for t in s.targets
        if isinstance(t, ast.Attribute)
    ]
    return [
        f
        for f, signal in out
        if not any(line > f.pos.line and attr == signal for line, attr in agreed)
    ]


def _agrees(e: ast.AST, agreeing: frozenset[str]) -> bool:
    return any(
        isinstance(n, ast.Call) and _dotted(n.func).rsplit(".", 1)[-1] in agreeing
        for n in ast.walk(e)
    )


def _pos(node: ast.AST) -> Pos:
    line = node.lineno
    return Pos(
        line, node.col_offset + 1, node.end_lineno or line, (node.end_col_offset or 0) + 1, line
    )


def _finding(path: str, s: ast.stmt, cond: tuple[ast.expr, str], sig: Signal) -> RawFinding:
    test, why = cond
    what = ast.unparse(s)[:60]
    agreed = "" if why.endswith("is the rank") else ", not agreed by a collective"
    return RawFinding(
        code="CL103",
        message=(
            f"ranks where `{ast.unparse(test)[:60]}` is true ({why}{agreed}) run `{what}`: "
            f"{sig.framework} stops its training loop on those ranks "
            "only, while the others go on into the next step's gradient reduction and wait "
            "there for them: the job hangs"
        ),
        path=path,
        pos=_pos(s),
        fix=(
            "Agree on the decision first: reduce the value over every rank (Lightning: "
            "`self.trainer.strategy.reduce_boolean_decision(flag, all=False)`, or "
            "`strategy.reduce(value)`; accelerate: `accelerator.set_trigger()` / "
            "`check_trigger()`; plain torch: all_reduce a flag with op=MAX), then stop on every "
            "rank."
        ),
        related=[(path, _pos(test), "this test differs between ranks")],
    )
