"""LibCST source -> `FileFacts`: per function, the tree of communication it performs.

One pass over each function body, in source order, with a small abstract environment that
tracks which values depend on the rank (and along which group dimension), on data, which
values are process groups (and their literal members), meshes, wrapped modules and library
objects whose methods communicate. Nothing is imported or run.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import libcst as cst
from libcst.helpers import get_full_name_for_node

from commlint.lint.ir import (
    AsyncFact,
    Branch,
    CallSite,
    Comm,
    Cond,
    Exit,
    FileFacts,
    Function,
    Loop,
    Node,
    Pos,
    RootFact,
    Spawn,
    Try,
)
from commlint.lint.names import Names, Scope, comprehension_scope
from commlint.lint.positions import Positions
from commlint.lint.table import ApiTable, CallFact

GLOBAL = "global"
EXACT_RANK_NAMES = frozenset({"rank", "global_rank", "world_rank", "my_rank", "rank_id"})
ZERO_NAMES = re.compile(
    r"(^|_)(is_main_process|is_main|is_master|is_global_zero|is_rank_zero|is_rank_0|main_process)$"
)
PURE_BUILTINS = frozenset(
    [
        "int",
        "str",
        "float",
        "bool",
        "abs",
        "min",
        "max",
        "len",
        "sum",
        "round",
        "divmod",
        "range",
        "list",
        "tuple",
        "sorted",
        "set",
        "frozenset",
        "reversed",
        "enumerate",
        "zip",
        "hash",
        "format",
        "repr",
    ]
)
ENV_GETTERS = frozenset({"os.environ.get", "os.getenv", "os.environ.__getitem__"})


@dataclass(frozen=True)
class Val:
    """What the linter knows about a value."""

    dims: frozenset[str] = frozenset()  # rank dimensions it depends on
    data: bool = False
    exact: bool = False  # equals this rank's global rank
    zero: bool = False  # true exactly on global rank 0
    origin: str = ""
    uniform: bool = False  # produced by a collective: equal on every member
    group: str | None = None  # a process group (its key)
    members: frozenset[int] | None = None
    size: int | None = None
    ints: tuple[int, ...] | None = None  # literal int or list of ints
    mesh: tuple[tuple[str, ...], tuple[int, ...]] | None = None
    submesh: str | None = None
    typ: str | None = None
    deps: tuple[str, ...] = ()
    guard: str | None = None
    group_rank_of: str | None = None
    tensor: bool = False  # a tensor whose values may differ between ranks (read = data source)
    rank_mod: int | None = None  # equals the global rank modulo this
    mod_test: tuple[int, int, bool] | None = None  # true iff (rank % k == a) == holds
    stride: tuple[int, int | None] | None = None  # ranks all ≡ a (mod k); a None: one unknown a
    loop_group: bool = False  # a group made by `new_group` in a loop: its name holds several
    payload: tuple[str, str] | None = None  # (variable it was made from, "dtype X" / "size")

    def tainted(self) -> bool:
        return bool(self.dims) or self.data

    @property
    def rank_tensor(self) -> bool:
        """A tensor of this rank's own values (not one a collective made equal everywhere)."""
        return self.tensor and not self.uniform


CLEAN = Val()


def join(*vals: Val) -> Val:
    """The taint of a value computed from several (`a + b`, `f(a, b)`)."""
    dims: frozenset[str] = frozenset()
    data = False
    origin = ""
    deps: tuple[str, ...] = ()
    for v in vals:
        if v.uniform:
            continue
        dims |= v.dims
        data = data or v.data
        if not origin and (v.dims or v.data):
            origin = v.origin
        deps += v.deps
    return Val(dims=dims, data=data, origin=origin, deps=deps)


# Tensor methods whose result is not a tensor of the receiver's values (sizes, metadata) or
# that read it (handled as data sources).
NON_TENSOR_METHODS = frozenset(
    {
        "size",
        "dim",
        "numel",
        "element_size",
        "nelement",
        "data_ptr",
        "stride",
        "storage_offset",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "get_device",
        "type",
        "item",
        "tolist",
        "any",
        "all",
        "wait",
        "register_hook",
        "backward",
        "numpy",
        "__len__",
    }
)
TENSOR_ATTRIBUTES = frozenset({"data", "T", "mT", "grad", "real", "imag"})
# Tensor methods that change the dtype, and to what.
DTYPE_METHODS = {
    "double": "torch.float64",
    "float": "torch.float32",
    "half": "torch.float16",
    "bfloat16": "torch.bfloat16",
    "long": "torch.int64",
    "int": "torch.int32",
}
# Views and copies that keep a tensor's dtype and number of elements.
SAME_PAYLOAD_METHODS = frozenset(
    {"flatten", "view", "reshape", "contiguous", "detach", "clone", "view_as", "reshape_as"}
)
DTYPE_NAMES = frozenset(
    {
        "float64",
        "float32",
        "float16",
        "bfloat16",
        "double",
        "float",
        "half",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "long",
        "int",
        "bool",
        "complex64",
        "complex128",
    }
)
WORLD_SIZE_TEXT = re.compile(r"(^|\.)(get_)?world_size(\(\))?$", re.IGNORECASE)
CONCAT_CALLS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})
PAD_CALLS = frozenset({"torch.nn.functional.pad"})


def _is_dtype(text: str) -> bool:
    """`torch.float64`, `torch.bfloat16`: a dtype spelled out."""
    head, _, name = text.rpartition(".")
    return head == "torch" and name in DTYPE_NAMES


def as_data(v: Val, origin: str) -> Val:
    """`v` as this rank's data (its own origin kept when it has one)."""
    return Val(data=True, dims=v.dims, exact=v.exact, origin=v.origin or origin)


# Tensor constructors whose values are their literal arguments (or zeros, ones, a fill value)
CONSTANT_TENSOR_CALLS = frozenset(
    {"torch.tensor", "torch.as_tensor", "torch.zeros", "torch.ones", "torch.full"}
)
CONSTANT_TENSOR = "a tensor of literal values"
_VALUE_FREE_KWARGS = frozenset({"device", "dtype", "requires_grad", "pin_memory", "layout"})


def _literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _literal(node.expression)
    if isinstance(node, (cst.List, cst.Tuple)):
        return all(isinstance(e, cst.Element) and _literal(e.value) for e in node.elements)
    return False


def _literal_call(node: cst.Call) -> bool:
    """Every value-giving argument is a literal (`torch.tensor([0], device=d)`)."""
    for a in node.args:
        if a.keyword is not None and a.keyword.value in _VALUE_FREE_KWARGS:
            continue
        if a.star or not _literal(a.value):
            return False
    return True


def read_tensor(v: Val, text: str) -> Val:
    """The Python value of a rank's tensor (`float(t)`, `if t > 0.5:`): a data source."""
    if not v.rank_tensor:
        return v
    return as_data(v, f"`{text[:40]}` reads this rank's tensor values")


def _mod_test_of(v: Val) -> tuple[int, int, bool] | None:
    """`v`'s residue test; a bare `rank % k` is true iff it is not 0 (`if rank % 2:`)."""
    if v.mod_test is None and v.rank_mod is not None:
        return (v.rank_mod, 0, False)
    return v.mod_test


def _int(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        try:
            return int(node.value, 0)
        except ValueError:
            return None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        v = _int(node.expression)
        return -v if v is not None else None
    return None


class Extractor:
    def __init__(
        self,
        path: str,
        module_name: str,
        source: str,
        table: ApiTable,
        names: Names | None = None,
    ) -> None:
        self.path = path
        self.names = names
        self.module_name = module_name
        self.source = source
        self.table = table
        self.facts = FileFacts(path=path, module=module_name, functions={})
        self.module_env: dict[str, Val] = {}
        self.class_envs: dict[str, dict[str, Val]] = {}
        self.lightning_classes: set[str] = set()
        self._last: dict[int, tuple[cst.CSTNode, Val]] = {}  # id(node) -> (node, last value)

    # ---------------------------------------------------------------- entry
    def run(self) -> FileFacts:
        module = cst.parse_module(self.source)
        self.module = module
        # qualified names come from the bindings of CPython's tree (LibCST's scope analysis
        # would visit every node of this one), positions from one counting code generation
        if self.names is None:
            self.names = Names(ast.parse(self.source))
        self.scope: Scope = self.names.module
        self._qn_cache: dict[int, list[str]] = {}
        self._pos = Positions(module)
        self.pending: list[tuple] = []
        self.stmt_line = 1
        self._function_body(
            key=f"{self.module_name}.<module>",
            name="<module>",
            qualname="<module>",
            stmts=list(module.body),
            env=self.module_env,
            class_key=None,
            fnode=module,
            params=(),
            defaults={},
            rank_guard=None,
        )
        while self.pending:
            item = self.pending.pop(0)
            self._do_function(*item)
        self.facts.noqa = parse_noqa(self.source)
        return self.facts

    # ------------------------------------------------------------- helpers
    def qnames(self, node: cst.CSTNode) -> list[str]:
        key = id(node)
        hit = self._qn_cache.get(key)
        if hit is not None:
            return hit
        full = get_full_name_for_node(node)
        names: list[str] = []
        if full is not None:
            at = self._at(node) if isinstance(node, cst.Name) else None
            names = sorted(q.lstrip(".") for q, _ in self.scope.qualified_names(full, at))
        self._qn_cache[key] = names
        return names

    def _at(self, node: cst.CSTNode) -> tuple[int, int]:
        line, col, _, _ = self._pos[node]
        return (line, col)

    def pos(self, node: cst.CSTNode) -> Pos:
        line, col, end_line, end_col = self._pos[node]
        return Pos(line, col + 1, end_line, end_col + 1, self.stmt_line)

    def text(self, node: cst.CSTNode) -> str:
        try:
            t = self._pos.code_of(node)
        except KeyError:  # a node made here, not parsed
            t = self.module.code_for_node(node)
        return " ".join(t.split())

    # ----------------------------------------------------------- functions
    def _queue_function(self, node: cst.FunctionDef, prefix: str, env_parent, class_key) -> None:
        self.pending.append((node, prefix, env_parent, class_key))

    def _do_function(self, node: cst.FunctionDef, prefix: str, parent_env, class_key) -> None:
        name = node.name.value
        qualname = f"{prefix}{name}"
        env: dict[str, Val]
        if isinstance(parent_env, _ClassEnv):
            env = _ClassEnv(self.module_env, parent_env.cls)
        else:
            env = dict(parent_env)
        params: list[str] = []
        defaults: dict[str, str] = {}
        p = node.params
        for param in [*p.posonly_params, *p.params, *p.kwonly_params]:
            pname = param.name.value
            params.append(pname)
            if param.default is not None:
                defaults[pname] = self.text(param.default)
            env[pname] = self._name_val(pname, pname) or Val()
        for star in (p.star_arg, p.star_kwarg):
            if isinstance(star, cst.Param):
                env[star.name.value] = CLEAN
        rank_guard = None
        for dec in node.decorators:
            dname = self.text(dec.decorator).split("(")[0]
            if dname.rsplit(".", 1)[-1] in self.table.rank_zero_decorators:
                self.stmt_line = self._pos.start_line(dec)
                rank_guard = Cond(
                    text=f"@{dname}",
                    pos=self.pos(dec.decorator),
                    dims=frozenset({GLOBAL}),
                    origin=f"`@{dname}` runs the function on one rank only",
                    true_ranks=frozenset({0}),
                    decorator=True,
                )
        self._function_body(
            key=f"{self.module_name}.{qualname}",
            name=name,
            qualname=qualname,
            stmts=list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else [],
            env=env,
            class_key=class_key,
            fnode=node,
            params=tuple(params),
            defaults=defaults,
            rank_guard=rank_guard,
        )

    def _function_body(
        self, *, key, name, qualname, stmts, env, class_key, fnode, params, defaults, rank_guard
    ) -> Function:
        saved = (
            getattr(self, "env", None),
            getattr(self, "cls", None),
            getattr(self, "qualprefix", ""),
            getattr(self, "returns", None),
            getattr(self, "async_pending", None),
            getattr(self, "restrict", None),
            getattr(self, "divergent_depth", 0),
            getattr(self, "_param_names", set()),
            getattr(self, "loop_depth", 0),
            getattr(self, "mod_restrict", []),
            self.scope,
        )
        if isinstance(fnode, cst.FunctionDef):
            found = self.names.scope_of(self._pos.start_line(fnode.name), fnode.name.value)
            self.scope = found if found is not None else self.names.module.child("function", name)
        self.env = env
        self.cls = class_key
        self.qualprefix = "" if qualname == "<module>" else qualname + ".<locals>."
        self.returns: list[Val] = []
        self.async_pending: list[tuple[str, AsyncFact]] = []
        self.restrict: list[tuple[frozenset[int] | None, frozenset[int] | None, Cond]] = []
        self.divergent_depth = 0
        self.loop_depth = 0
        self.mod_restrict: list[tuple[int, int, bool] | None] = []
        self._param_names = set(params)
        body = self.block(stmts)
        func = Function(
            key=key,
            name=name,
            qualname=qualname,
            path=self.path,
            pos=self.pos(fnode) if not isinstance(fnode, cst.Module) else Pos(1, 1, 1, 1, 1),
            params=params,
            param_defaults=defaults,
            body=body,
            rank_guard=rank_guard,
            returns_rank=frozenset().union(*(v.dims for v in self.returns))
            if self.returns
            else frozenset(),
        )
        if self.async_pending:
            counts = _name_counts(fnode)
            for var, fact in self.async_pending:
                if counts[var] <= 1:
                    self.facts.async_facts.append(fact)
        self.facts.functions[key] = func
        (
            self.env,
            self.cls,
            self.qualprefix,
            self.returns,
            self.async_pending,
            self.restrict,
            self.divergent_depth,
            self._param_names,
            self.loop_depth,
            self.mod_restrict,
            self.scope,
        ) = saved
        return func

    # ---------------------------------------------------------- statements
    def block(self, stmts) -> list[Node]:
        out: list[Node] = []
        saved = getattr(self, "out", None)
        self.out = out
        for stmt in stmts:
            self.statement(stmt)
        self.out = saved
        return out

    def emit(self, node: Node) -> None:
        self.out.append(node)

    def statement(self, stmt: cst.CSTNode) -> None:
        self.stmt_line = self._pos.start_line(stmt)
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small_statement(small)
            return
        meth = getattr(self, f"stmt_{type(stmt).__name__}", None)
        if meth:
            meth(stmt)

    def small_statement(self, s: cst.CSTNode) -> None:
        if isinstance(s, cst.Expr):
            before = len(self.out)
            self.expr(s.value)
            if isinstance(s.value, cst.Call):
                whole = self.pos(s.value)
                for n in self.out[before:]:
                    if (
                        isinstance(n, Comm)
                        and not n.blocking
                        and n.kind != "create"
                        and (n.pos.line, n.pos.col) == (whole.line, whole.col)
                    ):
                        self._async_fact(n, "discarded")
        elif isinstance(s, cst.Assign) and self._assign_pairwise(s):
            pass
        elif isinstance(s, cst.Assign):
            before = len(self.out)
            self._current_target = self.text(s.targets[0].target) if len(s.targets) == 1 else None
            v = self.expr(s.value)
            self._current_target = None
            made = self._payload_of(s.value)
            if made is not None:
                v = replace(v, payload=made)
            if (
                v.loop_group
                and isinstance(s.value, cst.Name)
                and len(s.targets) == 1
                and isinstance(s.targets[0].target, cst.Name | cst.Attribute)
            ):
                # `for ranks in ...: group = new_group(ranks); if rank in ranks: tp = group`:
                # `group` names a new group on every iteration; `tp` names the one kept
                v = replace(v, group=self.text(s.targets[0].target), loop_group=False)
            for t in s.targets:
                self.bind(t.target, v)
            self._track_async(s.value, [t.target for t in s.targets], before)
        elif isinstance(s, cst.AnnAssign) and s.value is not None:
            before = len(self.out)
            v = self.expr(s.value)
            self.bind(s.target, v)
            self._track_async(s.value, [s.target], before)
        elif isinstance(s, cst.AugAssign):
            v = join(self.expr(s.value), self.expr(s.target))
            self.bind(s.target, v)
        elif isinstance(s, cst.Return):
            if s.value is not None:
                self.returns.append(self.expr(s.value))
            self.emit(Exit("return", self.pos(s), "return"))
        elif isinstance(s, cst.Raise):
            if s.exc is not None:
                self.expr(s.exc)
            self.emit(Exit("raise", self.pos(s), self.text(s)))
        elif isinstance(s, cst.Break):
            self.emit(Exit("break", self.pos(s), "break"))
        elif isinstance(s, cst.Continue):
            self.emit(Exit("continue", self.pos(s), "continue"))

    def _payload_root(self, expr: cst.BaseExpression) -> str | None:
        """The variable a tensor expression views or copies (`g.flatten()` -> `g`)."""
        while (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in SAME_PAYLOAD_METHODS
        ):
            expr = expr.func.value
        if isinstance(expr, cst.Name | cst.Attribute):
            return self.text(expr)
        return None

    def _payload_of(self, value: cst.BaseExpression) -> tuple[str, str] | None:
        """`buf = t.to(torch.float64)` / `t.double()`: t with another dtype; `torch.cat([t,
        pad])` / `F.pad(t, ...)`: t with more elements. What a collective's buffer is made
        from, to compare the buffers that the arms of a rank branch pass."""
        if not isinstance(value, cst.Call):
            return None
        func = value.func
        if isinstance(func, cst.Attribute):
            root = self._payload_root(func.value)
            meth = func.attr.value
            if root is not None and meth in DTYPE_METHODS and not value.args:
                return (root, f"dtype {DTYPE_METHODS[meth]}")
            if root is not None and meth == "to":
                arg = _kwarg(value, "dtype", None)
                if arg is None:
                    arg = next(
                        (
                            a.value
                            for a in value.args
                            if a.keyword is None and _is_dtype(self.text(a.value))
                        ),
                        None,
                    )
                if arg is not None:
                    return (root, f"dtype {self.text(arg)}")
        names = set(self.qnames(func))
        if names & PAD_CALLS and value.args:
            root = self._payload_root(value.args[0].value)
            return (root, "size") if root else None
        if names & CONCAT_CALLS and value.args:
            parts = value.args[0].value
            if isinstance(parts, cst.List | cst.Tuple) and len(parts.elements) >= 2:
                root = self._payload_root(parts.elements[0].value)
                return (root, "size") if root else None
        return None

    def _track_async(self, value, targets, before: int) -> None:
        if not isinstance(value, cst.Call):
            return
        comms = [n for n in self.out[before:] if isinstance(n, Comm)]
        if not comms or comms[-1].blocking or comms[-1].kind == "create":
            return
        if len(targets) == 1 and isinstance(targets[0], cst.Name):
            fact = AsyncFact(comms[-1].op, comms[-1].text, comms[-1].pos, "unused")
            self.async_pending.append((targets[0].value, fact))

    def _async_fact(self, n: Comm, status: str) -> None:
        self.facts.async_facts.append(AsyncFact(n.op, n.text, n.pos, status))

    def stmt_FunctionDef(self, node: cst.FunctionDef) -> None:
        prefix = self.qualprefix
        if self.cls and not prefix:
            prefix = self.cls.split(".", 1)[1] + "." if "." in self.cls else ""
        env = self.env if self.env is not self.module_env else self.module_env
        self._queue_function(node, prefix, env, self.cls)

    def stmt_ClassDef(self, node: cst.ClassDef) -> None:
        qual = f"{self.qualprefix}{node.name.value}"
        class_key = f"{self.module_name}.{qual}"
        cenv = self.class_envs.setdefault(class_key, {})
        for base in node.bases:
            for q in self.qnames(base.value):
                typ = self.table.module_base(q)
                if typ:
                    self.lightning_classes.add(class_key)
            if self.text(base.value).rsplit(".", 1)[-1] == "LightningModule":
                self.lightning_classes.add(class_key)
        bases = tuple(q for base in node.bases for q in self.qnames(base.value))
        consts = _int_class_attributes(node)
        if bases or consts:
            self.facts.classes[class_key] = (bases, consts)
        methods = (
            [s for s in node.body.body if isinstance(s, cst.FunctionDef)]
            if isinstance(node.body, cst.IndentedBlock)
            else []
        )
        methods.sort(key=lambda f: f.name.value not in ("__init__", "setup"))
        env = dict(self.module_env)
        env["__class_env__"] = CLEAN
        for m in methods:
            self.pending.append((m, qual + ".", _ClassEnv(env, cenv), class_key))

    def stmt_If(self, node: cst.If) -> None:
        cond = self.cond(node.test)
        fixed = self._fixed_value(cond)
        if fixed is None:
            fixed = _decided_by_world_size(node.test, self.text)
        arms: list[list[Node]] = []
        payloads = {k: v.payload for k, v in self.env.items()}
        arms.append(self.arm(node.body.body, cond, True))
        # one environment runs through both arms; what the first arm made of a buffer
        # (`v = torch.cat([v, pad])`) does not hold in the second
        for k, v in list(self.env.items()):
            if v.payload != payloads.get(k):
                self.env[k] = replace(v, payload=payloads.get(k))
        if node.orelse is None:
            arms.append([])
        elif isinstance(node.orelse, cst.If):
            arms.append(self.arm([node.orelse], cond, False))
        else:
            arms.append(self.arm(node.orelse.body.body, cond, False))
        if fixed is not None:
            for n in arms[0 if fixed else 1]:  # the other arm is dead on every rank here
                self.emit(n)
            return
        if cond.data:
            self._implicit_flow(node, cond)
        self.emit(Branch(cond, arms, self.pos(node.test), "if"))

    def _implicit_flow(self, node: cst.If, cond: Cond) -> None:
        """A name set in an arm of a branch on this rank's data (`if val < best: bad = 0
        else: bad += 1`) holds what that data decided, whatever value it is set to: a patience
        counter of an un-reduced validation loss differs between ranks."""
        names = _assigned_names([node])
        why = cond.origin or "depends on data"
        origin = f"set under `{cond.text[:40]}` (line {cond.pos.line}): {why}"
        for name in names:
            v = self.env.get(name)
            if v is not None and not v.data and not v.uniform:
                self.env[name] = replace(v, data=True, origin=origin)

    def arm(self, stmts, cond: Cond, truth: bool | None) -> list[Node]:
        self._enter(cond, truth)
        try:
            return self.block(stmts)
        finally:
            self._leave(cond)

    def _fixed_value(self, cond: Cond) -> bool | None:
        """The value of a rank condition when it is the same on every rank that can reach
        it (`if is_main_process():` inside the odd-rank arm of `if rank % 2 == 0:`); None when
        it can differ."""
        if cond.data or not cond.dims:
            return None
        rank_set, excluded, _ = self._restriction()
        mods = [m for m in self.mod_restrict if m is not None]
        if rank_set is None and excluded is None and not mods:
            return None

        def reachable(r: int) -> bool:
            if rank_set is not None and r not in rank_set:
                return False
            if excluded is not None and r in excluded:
                return False
            return all((r % k == a) == holds for k, a, holds in mods)

        def unreachable(ranks: frozenset[int]) -> bool:
            return not any(reachable(r) for r in ranks)

        if cond.true_ranks is not None and unreachable(cond.true_ranks):
            return False
        if cond.false_ranks is not None and unreachable(cond.false_ranks):
            return True
        return None

    def _enter(self, cond: Cond, truth: bool | None) -> None:
        mt = cond.mod_test if not cond.data else None
        self.mod_restrict.append(
            (mt[0], mt[1], mt[2] == truth) if mt is not None and truth is not None else None
        )
        # an and/or's rank sets are supersets: fine as "only these ranks get here", not as
        # "these ranks never get here"
        if truth is True:
            excluded = None if cond.approx else cond.false_ranks
            self.restrict.append((cond.true_ranks, excluded, cond))
        elif truth is False:
            excluded = None if cond.approx else cond.true_ranks
            self.restrict.append((cond.false_ranks, excluded, cond))
        else:
            self.restrict.append((None, None, cond))
        if cond.divergent:
            self.divergent_depth += 1

    def _leave(self, cond: Cond) -> None:
        self.mod_restrict.pop()
        self.restrict.pop()
        if cond.divergent:
            self.divergent_depth -= 1

    def stmt_Match(self, node: cst.Match) -> None:
        v = self.expr(node.subject)
        cond = self._cond_from_val(node.subject, v)
        arms = [self.arm(case.body.body, cond, None) for case in node.cases]
        if not any(
            isinstance(c.pattern, cst.MatchAs) and c.pattern.pattern is None for c in node.cases
        ):
            arms.append([])
        self.emit(Branch(cond, arms, self.pos(node.subject), "match"))

    def stmt_For(self, node: cst.For) -> None:
        it = self.expr(node.iter)
        self.bind(node.target, replace(it, stride=None))
        cond = self._cond_from_val(node.iter, it) if it.tainted() else None
        body = self._loop_body(cond, node.body.body)
        unordered = self.text(node.iter)[:60] if _iterates_a_set(node.iter) else None
        self.emit(Loop(cond, body, self.pos(node.iter), "for", unordered))
        if node.orelse is not None:
            for n in self.block(node.orelse.body.body):
                self.emit(n)

    def stmt_While(self, node: cst.While) -> None:
        c = self.cond(node.test)
        cond = c if c.divergent else None
        body = self._loop_body(cond, node.body.body)
        self.emit(Loop(cond, body, self.pos(node.test), "while"))

    def _loop_body(self, cond: Cond | None, stmts) -> list[Node]:
        """A loop's body, under its rank-dependent condition (if any)."""
        if cond is not None:
            self._enter(cond, None)
        self.loop_depth += 1
        body = self.block(stmts)
        self.loop_depth -= 1
        if cond is not None:
            self._leave(cond)
        return body

    def stmt_With(self, node: cst.With) -> None:
        for item in node.items:
            v = self.expr(item.item)
            if item.asname is not None:
                self.bind(item.asname.name, v)
        for n in self.block(node.body.body):
            self.emit(n)

    def stmt_Try(self, node: cst.Try) -> None:
        body = self.block(node.body.body)
        handlers: list[list[Node]] = []
        for h in node.handlers:
            if h.name is not None:
                self.bind(h.name.name, CLEAN)
            hbody = self.block(h.body.body)
            exc = self.text(h.type) if h.type is not None else ""
            if "StopIteration" in exc:
                cond = Cond(
                    text=f"except {exc}",
                    pos=self.pos(h),
                    data=True,
                    origin="the iterator is exhausted after a number of items that can "
                    "differ between ranks",
                )
                body.append(Branch(cond, [hbody, []], self.pos(h), "exhaustion"))
            elif _swallows_oom(exc, self.text(h.body)) and any(
                isinstance(n, Exit) and n.kind in ("continue", "break", "return") for n in hbody
            ):
                # `except torch.cuda.OutOfMemoryError: continue` — memory runs out on one rank
                # (more data, more activations), which then skips the step's collectives
                cond = Cond(
                    text=f"except {exc}",
                    pos=self.pos(h),
                    data=True,
                    origin="running out of memory depends on each rank's own data and device",
                )
                body.append(Branch(cond, [hbody, []], self.pos(h), "oom"))
            else:
                handlers.append(hbody)
        orelse = self.block(node.orelse.body.body) if node.orelse else []
        final = self.block(node.finalbody.body.body) if node.finalbody else []
        self.emit(Try(body, handlers, orelse, final, self.pos(node), _lone_call(node.body.body)))

    # ----------------------------------------------------------- binding
    def _assign_pairwise(self, s: cst.Assign) -> bool:
        """`rank, world = dist.get_rank(), dist.get_world_size()`: each name gets its own
        value (binding the joined tuple to both would make `world` depend on the rank)."""
        value = s.value
        if len(s.targets) != 1 or not isinstance(value, cst.Tuple | cst.List):
            return False
        target = s.targets[0].target
        if not isinstance(target, cst.Tuple | cst.List):
            return False
        pairs = list(zip(target.elements, value.elements, strict=False))
        if len(target.elements) != len(value.elements) or any(
            not isinstance(t, cst.Element)
            or not isinstance(e, cst.Element)
            or not isinstance(t.value, cst.Name)
            for t, e in pairs
        ):
            return False
        vals = [self.expr(e.value) for _, e in pairs]
        for (t, _), v in zip(pairs, vals, strict=True):
            self.bind(t.value, v)
        return True

    def bind(self, target: cst.BaseExpression, v: Val) -> None:
        if isinstance(target, cst.Name):
            self.env[target.value] = v
        elif isinstance(target, cst.Attribute):
            key = self.text(target)
            if key.startswith("self.") and isinstance(self.env, _ClassEnv):
                self.env.cls[key] = v
            self.env[key] = v
        elif isinstance(target, cst.Tuple | cst.List):
            for k, el in enumerate(target.elements):
                if isinstance(el, cst.Element):
                    sub = v
                    if v.typ and k > 0:
                        sub = replace(v, typ=None)
                    self.bind(el.value, sub)
        elif isinstance(target, cst.Subscript):
            self.expr(target.value)
            base = target.value
            if isinstance(base, cst.Name):
                old = self.env.get(base.value)
                if old is not None and old.origin == CONSTANT_TENSOR:
                    self.env[base.value] = CLEAN  # `stop[0] = flag`: values of this rank now

    def lookup(self, key: str) -> Val | None:
        return self.env.get(key)

    def _name_val(self, name: str, text: str) -> Val | None:
        if name in self.table.rank_attributes or name in self.table.rank_helpers:
            exact = name in EXACT_RANK_NAMES
            return Val(
                dims=frozenset({GLOBAL}),
                exact=exact,
                zero=bool(ZERO_NAMES.search(name)) and "local" not in name,
                origin=f"`{text}` names a rank",
            )
        return None

    # ----------------------------------------------------------- conditions
    def cond(self, test: cst.BaseExpression) -> Cond:
        v = read_tensor(self.expr(test), self.text(test))
        c = self._cond_from_val(test, v)
        if c.dims and self.cls and isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            target = test.comparisons[0]
            attr = target.comparator
            op = {cst.Equal: "==", cst.NotEqual: "!="}.get(type(target.operator))
            if (
                op is not None
                and isinstance(attr, cst.Attribute)
                and isinstance(attr.value, cst.Name)
                and attr.value.value == "self"
                and self.lookup(f"self.{attr.attr.value}") is None
            ):
                c = replace(c, vs_attr=(op, attr.attr.value, self.cls))
        return c

    def _cond_from_val(self, node: cst.BaseExpression, v: Val) -> Cond:
        true_ranks, false_ranks = self.rank_sets(node)
        mod_test = _mod_test_of(v)
        bare = node
        while isinstance(bare, cst.UnaryOperation) and isinstance(bare.operator, cst.Not):
            bare = bare.expression
        return Cond(
            mod_test=mod_test,
            approx=isinstance(bare, cst.BooleanOperation),
            text=self.text(node)[:80],
            pos=self.pos(node),
            dims=v.dims,
            data=v.data and not v.uniform,
            origin=v.origin,
            guard=v.guard,
            true_ranks=true_ranks,
            false_ranks=false_ranks,
            deps=v.deps,
        )

    def rank_sets(self, node) -> tuple[frozenset[int] | None, frozenset[int] | None]:
        """Global ranks for which `node` is true / false, when a finite set is evident."""
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            t, f = self.rank_sets(node.expression)
            return f, t
        if isinstance(node, cst.BooleanOperation):
            lt, lf = self.rank_sets(node.left)
            rt, rf = self.rank_sets(node.right)
            if isinstance(node.operator, cst.And):
                t = lt & rt if lt is not None and rt is not None else (lt if lt is not None else rt)
                f = lf | rf if lf is not None and rf is not None else None
            else:
                t = lt | rt if lt is not None and rt is not None else None
                f = lf & rf if lf is not None and rf is not None else (lf if lf is not None else rf)
            return t, f
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            left, comp = node.left, node.comparisons[0]
            right, op = comp.comparator, comp.operator
            lv = self._peek(left)
            rv = self._peek(right)
            if not (lv.exact and GLOBAL in lv.dims) and rv.exact and GLOBAL in rv.dims:
                left, right, lv, rv = right, left, rv, lv
                op = _flip(op)
            if not (lv.exact and GLOBAL in lv.dims):
                return None, None
            k = _int(right)
            lits = self._literal_ints(right)
            if isinstance(op, cst.Equal) and k is not None:
                return frozenset({k}), None
            if isinstance(op, cst.NotEqual) and k is not None:
                return None, frozenset({k})
            if isinstance(op, cst.In) and lits is not None:
                return frozenset(lits), None
            if isinstance(op, cst.NotIn) and lits is not None:
                return None, frozenset(lits)
            if isinstance(op, cst.LessThan) and k is not None and 0 < k <= 4096:
                return frozenset(range(k)), None
            if isinstance(op, cst.LessThanEqual) and k is not None and 0 <= k < 4096:
                return frozenset(range(k + 1)), None
            if isinstance(op, cst.GreaterThanEqual) and k is not None and 0 < k <= 4096:
                return None, frozenset(range(k))
            if isinstance(op, cst.GreaterThan) and k is not None and 0 <= k < 4096:
                return None, frozenset(range(k + 1))
            return None, None
        v = self._peek(node)
        if v.zero:
            return frozenset({0}), None
        return None, None

    def _peek(self, node) -> Val:
        """The value of an expression already evaluated (no new communication recorded)."""
        seen = self._last.get(id(node))
        if seen is not None and seen[0] is node:
            # Its value from the evaluation that just ran: evaluating again would double the
            # work per level of nested calls (each call peeks at its arguments).
            return seen[1]
        saved = self.out
        self.out = []
        try:
            return self.expr(node)
        finally:
            self.out = saved

    def _literal_ints(self, node) -> tuple[int, ...] | None:
        v = self._peek(node)
        return v.ints

    # ----------------------------------------------------------- expressions
    def expr(self, node: cst.BaseExpression | None) -> Val:
        if node is None:
            return CLEAN
        meth = getattr(self, f"ex_{type(node).__name__}", None)
        if meth is not None:
            v = meth(node)
        else:
            vals = [self.expr(c) for c in node.children if isinstance(c, cst.BaseExpression)]
            v = join(*vals) if vals else CLEAN
        self._last[id(node)] = (node, v)
        return v

    def ex_Integer(self, node: cst.Integer) -> Val:
        k = _int(node)
        return Val(ints=(k,)) if k is not None else CLEAN

    def ex_UnaryOperation(self, node: cst.UnaryOperation) -> Val:
        k = _int(node)
        if k is not None:
            return Val(ints=(k,))
        v = self.expr(node.expression)
        if isinstance(node.operator, cst.Not):
            v = read_tensor(v, self.text(node.expression))
            mt = _mod_test_of(v)
            flipped = (mt[0], mt[1], not mt[2]) if mt else None
            return replace(join(v), zero=False, guard=v.guard, mod_test=flipped)
        return replace(join(v), tensor=v.rank_tensor)

    def ex_Name(self, node: cst.Name) -> Val:
        v = self.lookup(node.value) or self._getter_group(self.qnames(node))
        if v is not None:
            return v
        return self._name_val(node.value, node.value) or CLEAN

    def ex_Attribute(self, node: cst.Attribute) -> Val:
        key = self.text(node)
        v = self.lookup(key) or self._getter_group(self.qnames(node))
        if v is not None:
            return v
        base = self.expr(node.value)
        attr = node.attr.value
        if base.mesh is not None and attr in ("shape", "ndim", "mesh_dim_names"):
            return CLEAN
        nv = self._name_val(attr, key)
        if nv is not None:
            return nv
        if base.uniform:
            return base
        if base.rank_tensor and attr in TENSOR_ATTRIBUTES:
            return base
        return join(base)

    def _getter_group(self, names: list[str]) -> Val | None:
        """The group a configured group getter names (`mpu.get_data_parallel_group`)."""
        for q in names:
            g = self.table.group_getter(q)
            if g:
                return Val(group=g["group"])
        return None

    def ex_Subscript(self, node: cst.Subscript) -> Val:
        key = self.text(node)
        env_name = _env_key(key)
        if env_name is not None:
            return self._env_val(env_name, key)
        base = self.expr(node.value)
        idx: list[Val] = []
        for el in node.slice:
            if isinstance(el.slice, cst.Index):
                # `parts[rank]`: this rank's element of a list built the same way everywhere;
                # its properties are usually uniform (a slice `data[rank::world]` is not)
                v = self.expr(el.slice.value)
                idx.append(Val(data=v.data, origin=v.origin) if v.data else CLEAN)
            elif isinstance(el.slice, cst.Slice):
                idx.extend(self.expr(x) for x in (el.slice.lower, el.slice.upper, el.slice.step))
        if (base.mesh is not None or "mesh" in self.text(node.value).lower()) and len(
            node.slice
        ) == 1:
            sl = node.slice[0].slice
            if isinstance(sl, cst.Index) and isinstance(sl.value, cst.SimpleString):
                dim = sl.value.evaluated_value
                return Val(mesh=base.mesh or ((), ()), submesh=str(dim))
        if base.ints is not None and idx and idx[0].ints and len(idx[0].ints) == 1:
            i = idx[0].ints[0]
            if -len(base.ints) <= i < len(base.ints):
                return Val(ints=(base.ints[i],))
        if base.uniform:
            return base
        return replace(join(base, *idx), tensor=base.rank_tensor)

    def _env_val(self, name: str, text: str) -> Val:
        if name in self.table.rank_env:
            return Val(
                dims=frozenset({GLOBAL}),
                exact=name == "RANK",
                origin=f"`{text}` is the launcher's {name}",
            )
        return CLEAN

    def ex_List(self, node) -> Val:
        vals = [self.expr(e.value) for e in node.elements if isinstance(e, cst.Element)]
        if vals and all(v.ints is not None and len(v.ints) == 1 for v in vals):
            return Val(ints=tuple(v.ints[0] for v in vals))
        if vals and all(v.group for v in vals):
            return Val(typ="group-list")
        return join(*vals) if vals else Val(ints=())

    ex_Tuple = ex_List
    ex_Set = ex_List

    def ex_Comparison(self, node: cst.Comparison) -> Val:
        if len(node.comparisons) == 1 and _is_sentinel(node.comparisons[0]):
            # `LOCAL_RANK != -1`, `rank is None`: "was a rank given?" is the same on all ranks
            self.expr(node.left)
            return CLEAN
        left = self.expr(node.left)
        vals = [left]
        guard = None
        for comp in node.comparisons:
            right = self.expr(comp.comparator)
            vals.append(right)
            if isinstance(comp.operator, cst.In) and left.dims:
                guard = "*"
        v = join(*vals)
        return replace(
            v,
            guard=guard or next((x.guard for x in vals if x.guard), None),
            tensor=any(x.rank_tensor for x in vals),
            mod_test=self._mod_test(node, vals),
        )

    def _mod_test(self, node: cst.Comparison, vals: list[Val]) -> tuple[int, int, bool] | None:
        """`rank % k == a` / `a != rank % k` / `stage == a` with `stage = rank % k`."""
        if len(node.comparisons) != 1 or len(vals) != 2:
            return None
        op = node.comparisons[0].operator
        if not isinstance(op, cst.Equal | cst.NotEqual):
            return None
        a, b = vals
        if a.rank_mod is None:
            a, b = b, a
        if a.rank_mod is None or b.rank_mod is not None or not b.ints or len(b.ints) != 1:
            return None
        k, r = a.rank_mod, b.ints[0]
        if not 0 <= r < k:
            return (k, 0, False) if isinstance(op, cst.NotEqual) else None
        return (k, r, isinstance(op, cst.Equal))

    def ex_BinaryOperation(self, node: cst.BinaryOperation) -> Val:
        left, right = self.expr(node.left), self.expr(node.right)
        v = join(left, right)
        if (
            isinstance(node.operator, cst.Modulo)
            and left.exact
            and GLOBAL in left.dims
            and right.ints
            and len(right.ints) == 1
            and right.ints[0] > 0
        ):
            return replace(v, rank_mod=right.ints[0])
        return replace(v, tensor=left.rank_tensor or right.rank_tensor)

    def ex_BooleanOperation(self, node) -> Val:
        if isinstance(node.operator, cst.And) and _is_single_stage_test(node):
            return CLEAN  # first and last pipeline stage at once: pipeline size 1, everywhere
        a = read_tensor(self.expr(node.left), self.text(node.left))
        b = read_tensor(self.expr(node.right), self.text(node.right))
        v = join(a, b)
        return replace(v, guard=a.guard or b.guard)

    def ex_IfExp(self, node: cst.IfExp) -> Val:
        cond = self.cond(node.test)
        body_out: list[Node] = []
        else_out: list[Node] = []
        saved = self.out
        self._enter(cond, True)
        self.out = body_out
        a = self.expr(node.body)
        self._leave(cond)
        self._enter(cond, False)
        self.out = else_out
        b = self.expr(node.orelse)
        self._leave(cond)
        self.out = saved
        if body_out or else_out:
            self.emit(Branch(cond, [body_out, else_out], self.pos(node.test), "ternary"))
        v = join(a, b, self._peek(node.test))
        if a.group and a.group == b.group:
            return a
        return v

    def ex_Lambda(self, node) -> Val:
        return CLEAN

    def ex_SimpleString(self, node) -> Val:
        return CLEAN

    def ex_FormattedString(self, node) -> Val:
        vals = [
            self.expr(p.expression)
            for p in node.parts
            if isinstance(p, cst.FormattedStringExpression)
        ]
        return join(*vals) if vals else CLEAN

    def _comprehension(self, node) -> Val:
        fors = []
        f = node.for_in
        vals = []
        outer = self.scope
        while f is not None:
            it = self.expr(f.iter)
            if f is node.for_in:  # the first iterable is the enclosing scope's
                self.scope = comprehension_scope(outer, _target_names(node.for_in))
            self.bind(f.target, replace(it, stride=None))
            vals.append(it)
            fors.append(f)
            for cond in f.ifs:
                vals.append(self.expr(cond.test))
            f = f.inner_for_in
        saved = self.out
        body: list[Node] = []
        self.out = body
        if isinstance(node, cst.DictComp):
            self.expr(node.key)
            vals.append(self.expr(node.value))
        else:
            vals.append(self.expr(node.elt))
        self.out = saved
        self.scope = outer
        if body:
            it = join(*vals[:1])
            cond = self._cond_from_val(fors[0].iter, it) if it.tainted() else None
            self.emit(Loop(cond, body, self.pos(fors[0].iter), "comprehension"))
        v = join(*vals)
        if isinstance(node, cst.ListComp | cst.GeneratorExp) and not v.tainted():
            elt = self._peek(node.elt) if not isinstance(node, cst.DictComp) else CLEAN
            if elt.group:
                return Val(typ="group-list")
        if not isinstance(node, cst.DictComp) and not v.tainted():
            stride = self._comprehension_stride(node)
            if stride is not None:
                return replace(v, stride=stride)
        return v

    def _comprehension_stride(self, node) -> tuple[int, int | None] | None:
        """`[r for r in range(world_size) if r % k == a]`: the ranks ≡ a (mod k)."""
        f = node.for_in
        if f.inner_for_in is not None or not isinstance(f.target, cst.Name):
            return None
        var = f.target.value
        if not (isinstance(node.elt, cst.Name) and node.elt.value == var):
            return None
        it = f.iter
        if not (isinstance(it, cst.Call) and self.text(it.func) == "range"):
            return None
        base = self._peek(it).stride
        if base is None and len(it.args) == 3:
            return None  # a step that is not a literal
        stride = base
        for c in f.ifs:
            test = c.test
            if not (
                isinstance(test, cst.Comparison)
                and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.Equal)
                and isinstance(test.left, cst.BinaryOperation)
                and isinstance(test.left.operator, cst.Modulo)
                and isinstance(test.left.left, cst.Name)
                and test.left.left.value == var
            ):
                return None
            k = self._peek(test.left.right).ints
            a = self._peek(test.comparisons[0].comparator).ints
            if not k or not a or len(k) != 1 or len(a) != 1 or k[0] <= 1:
                return None
            if not 0 <= a[0] < k[0]:
                return None
            new = (k[0], a[0])
            if stride is not None and stride not in ((1, 0), new):
                return None
            stride = new
        return stride

    ex_ListComp = _comprehension
    ex_SetComp = _comprehension
    ex_GeneratorExp = _comprehension
    ex_DictComp = _comprehension

    # ----------------------------------------------------------------- calls
    def ex_Call(self, node: cst.Call) -> Val:
        func = node.func
        names = self.qnames(func)
        recv_val: Val | None = None
        if isinstance(func, cst.Attribute):
            recv_val = self.expr(func.value)
        elif not isinstance(func, cst.Name):
            recv_val = self.expr(func)
        args = [self.expr(a.value) for a in node.args]
        callee_text = self.text(func)
        last = callee_text.rsplit(".", 1)[-1]
        self._forget_constants(node)

        # os.environ.get("RANK") / os.getenv("RANK")
        if any(q in ENV_GETTERS for q in names) and node.args:
            a0 = node.args[0].value
            if isinstance(a0, cst.SimpleString):
                return self._env_val(str(a0.evaluated_value), self.text(node))
        for q in names:
            if q in self.table.exit_calls or q in ("builtins.exit", "builtins.quit"):
                self.emit(Exit("exit", self.pos(node), self.text(node)[:60]))
                return CLEAN
        for q in names:
            fact = self.table.call(q)
            if fact is not None:
                return self.comm_call(node, fact, callee_text)
        getter = self._getter_group(names)
        if getter is not None:
            return getter
        for q in names:
            rs = self.table.rank_source(q)
            if rs:
                return self.rank_source_val(node, rs)
        for q in names:
            w = self.table.wrapper(q)
            if w:
                grp = self._group_arg(node, _spec(w.get("group")))
                typ = f"wrapped:{w['op']}:{grp[0]}"
                if "in_place" in w and node.args:
                    target = node.args[int(w["in_place"])].value
                    self.bind(target, Val(typ=typ))
                return Val(typ=typ)
        for q in names:
            typ = self.table.constructor(q)
            if typ:
                return Val(typ=typ)
        for q in names:
            if self.table.in_set(self.table.thread_spawners, q):
                return self.spawn(node, "a thread", _kwarg(node, "target", 1))
        for q in names:
            if self.table.in_set(self.table.data_sources, q):
                if args and all(a.uniform for a in args):
                    return Val(uniform=True)  # `torch.equal(reduced_max, reduced_min)`
                return Val(data=True, origin=f"`{self.text(node)[:40]}` differs between ranks")
        for q in names:
            if q in self.table.random_tensors:
                v = join(*args)
                return Val(
                    tensor=True,
                    dims=v.dims,
                    data=v.data,
                    origin=v.origin or f"`{self.text(node)[:40]}` draws random numbers",
                )
            if q in CONSTANT_TENSOR_CALLS and _literal_call(node):
                # `torch.tensor([0])`: the same values on every rank
                return Val(uniform=True, origin=CONSTANT_TENSOR)
            if q in self.table.tensor_functions:
                v = join(*args)
                if v.tainted() or any(a.rank_tensor for a in args):
                    return replace(v, tensor=True)
                return CLEAN
        if any(q.startswith("builtins.") for q in names) or (not names and last in PURE_BUILTINS):
            if last in PURE_BUILTINS:
                if last in ("float", "int", "bool") and len(args) == 1 and args[0].rank_tensor:
                    return read_tensor(args[0], self.text(node))
                v = join(*args)
                if last in ("range", "list", "tuple", "sorted", "set") and args:
                    ints = self._range_ints(node, args)
                    if ints is not None:
                        return Val(ints=ints)
                    if last != "range" and len(args) == 1 and args[0].ints is not None:
                        return Val(ints=args[0].ints)
                    stride = self._range_stride(node, args)
                    if stride is None and last != "range" and len(args) == 1:
                        stride = args[0].stride
                    if stride is not None:
                        return replace(v, stride=stride)
                if last in ("int", "bool", "str") and args:
                    return replace(v, exact=args[0].exact, zero=args[0].zero)
                if last == "next" and len(node.args) == 1:
                    return Val(data=True, origin="`next()` without default")
                return v
            return CLEAN

        # methods, by receiver
        if isinstance(func, cst.Attribute) and recv_val is not None:
            res = self.method_call(node, func, recv_val, args, callee_text)
            if res is not None:
                return res
        if isinstance(func, cst.Name):
            func_val = self.lookup(func.value)
        else:
            func_val = self._peek(func) if isinstance(func, cst.Attribute) else recv_val
        if func_val is not None and func_val.typ and func_val.typ.startswith("wrapped:"):
            _, op, grp = func_val.typ.split(":", 2)
            return self._emit_comm(
                node, CallFact(name=op, kind="collective", op=op), grp, callee_text, via=op
            )
        if last in self.table.rank_helpers:
            return Val(
                dims=frozenset({GLOBAL}),
                zero=bool(ZERO_NAMES.search(last)) and "local" not in last,
                origin=f"`{self.text(node)[:40]}` depends on the rank",
            )
        self._callbacks(node, callee_text)
        # a call of a project function
        site = self.callsite(node, names, callee_text)
        data = any(a.data and not a.uniform for a in args)
        if site is None:
            return Val(data=data, origin=next((a.origin for a in args if a.data), ""))
        self.emit(site)
        return Val(data=data, deps=site.names, origin=next((a.origin for a in args if a.data), ""))

    def _forget_constants(self, node: cst.Call) -> None:
        """A constant tensor (`stop = torch.tensor([0])`) changed in place (`stop.fill_(1)`)
        or handed to a call (which may change it) no longer holds the same values on every
        rank; a collective that takes it makes it uniform again afterwards."""
        func = node.func
        names = [a.value for a in node.args]
        if isinstance(func, cst.Attribute) and func.attr.value.endswith("_"):
            names.append(func.value)
        for n in names:
            if isinstance(n, cst.Name):
                v = self.env.get(n.value)
                if v is not None and v.origin == CONSTANT_TENSOR:
                    self.env[n.value] = CLEAN

    def _callbacks(self, node: cst.Call, callee_text: str) -> None:
        """A function defined inside this one and handed to a call (`study.optimize(
        _objective, n_trials=n)`, a closure as a callback) runs when the callee decides: a
        loop over it, whose count the file does not give (the linter does not look into the
        callee, even in the project)."""
        for a in node.args:
            if not isinstance(a.value, cst.Name):
                continue
            if self.scope.kind == "module":
                continue
            _, defs = self.scope.lookup(a.value.value)
            if not defs or not all(d.kind == "def" for d in defs):
                continue
            site = self.callsite_from(a.value, self.qnames(a.value))
            if site is None:
                continue
            # as often on every rank, as far as this file tells (a count that differs is the
            # callee's to show: `checkpoint(custom_forward)` runs it once everywhere)
            self.emit(Loop(None, [site], self.pos(node), "for"))

    def _range_stride(self, node: cst.Call, args: list[Val]) -> tuple[int, int | None] | None:
        """`range(a, n, k)` with a literal step k: every element is ≡ a (mod k); `a` may be
        unknown (`range(first, world_size, k)` in a loop over `first`), the bound always is."""
        if self.text(node.func).rsplit(".", 1)[-1] != "range":
            return None
        if len(args) == 1 and WORLD_SIZE_TEXT.search(self.text(node.args[0].value)):
            return (1, 0)  # range(world_size): every rank
        if len(args) != 3:
            return None
        if any(a.keyword is not None for a in node.args):
            return None
        step = args[2].ints
        if not step or len(step) != 1 or step[0] <= 1:
            return None
        start = args[0].ints
        k = step[0]
        return (k, start[0] % k) if start and len(start) == 1 else (k, None)

    def _range_ints(self, node: cst.Call, args: list[Val]) -> tuple[int, ...] | None:
        last = self.text(node.func).rsplit(".", 1)[-1]
        if last != "range":
            return None
        nums = [a.ints[0] if a.ints and len(a.ints) == 1 else None for a in args]
        if None in nums or not 1 <= len(nums) <= 3:
            return None
        r = range(*nums)
        return tuple(r) if len(r) <= 65536 else None

    def callsite(self, node: cst.Call, names: list[str], text: str) -> CallSite | None:
        cands: list[str] = []
        func = node.func
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value in ("self", "cls")
            and self.cls
        ):
            cands.append(f"{self.cls}.{func.attr.value}")
        for q in names:
            if q.startswith("builtins."):
                return None
            if ".<locals>.self." in q or q.startswith("self."):
                continue
            if "<locals>" in q:
                q = q.split(".<locals>.")[-1]
            cands.append(q)
            if "." not in q:
                cands.append(f"{self.module_name}.{self.qualprefix}{q}")
                cands.append(f"{self.module_name}.{q}")
        if not cands:
            if isinstance(func, cst.Name):
                cands.append(f"{self.module_name}.{func.value}")
            elif isinstance(func, cst.Attribute):
                return None
        group_args: dict[str, str] = {}
        for k, a in enumerate(node.args):
            if not isinstance(a.value, cst.Name | cst.Attribute | cst.Call | cst.Subscript):
                continue
            v = self._peek(a.value)
            gkey = v.group
            if gkey is None:
                # keyed as the caller's own collectives would key this expression
                if isinstance(a.value, cst.Name) and a.value.value in self._params():
                    gkey = f"param:{a.value.value}"
                elif isinstance(a.value, cst.Name) and a.value.value == "None":
                    gkey = "WORLD"
                else:
                    gkey = self.text(a.value)
            if a.keyword is not None:
                group_args[a.keyword.value] = gkey
            else:
                group_args[f"#{k}"] = gkey
        return CallSite(
            tuple(dict.fromkeys(cands)),
            text,
            self.pos(node),
            group_args,
            on_module=self.on_module(func),
        )

    def spawn(self, node: cst.Call, how: str, target: cst.BaseExpression | None) -> Val:
        if target is None:
            return CLEAN
        names = self.qnames(target)
        for q in names:
            fact = self.table.call(q)
            if fact is not None:
                comm = Comm(
                    kind=fact.kind,
                    op=fact.op,
                    group="WORLD",
                    text=self.text(target),
                    pos=self.pos(target),
                )
                self.emit(Spawn(comm, how, self.pos(node)))
                return CLEAN
        site = self.callsite_from(target, names)
        if site is not None:
            self.emit(Spawn(site, how, self.pos(node)))
        return CLEAN

    def callsite_from(self, target, names) -> CallSite | None:
        cands: list[str] = []
        if (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == "self"
            and self.cls
        ):
            cands.append(f"{self.cls}.{target.attr.value}")
        for q in names:
            if "<locals>" in q:
                q = q.split(".<locals>.")[-1]
            if q.startswith("self.") or q.startswith("builtins."):
                continue
            cands.append(q)
            if "." not in q:
                cands.append(f"{self.module_name}.{self.qualprefix}{q}")
                cands.append(f"{self.module_name}.{q}")
        if not cands:
            return None
        return CallSite(
            tuple(dict.fromkeys(cands)),
            self.text(target),
            self.pos(target),
            on_module=self.on_module(target),
        )

    def on_module(self, func: cst.BaseExpression) -> bool:
        """`mod.f` where `mod` is bound by an import (`torch.scatter`): a module's function."""
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
            return False
        return self.scope.is_import(func.value.value, self._at(func.value))

    def method_call(self, node, func: cst.Attribute, recv: Val, args, text) -> Val | None:
        meth = func.attr.value
        recv_text = self.text(func.value)
        # process groups, meshes (a DeviceMesh's methods are recognised by name)
        mesh_like = meth in ("get_group", "get_local_rank") and (
            not node.args or isinstance(node.args[0].value, cst.SimpleString)
        )
        if recv.mesh is None and mesh_like:
            recv = replace(recv, mesh=((), ()))
        if recv.mesh is not None:
            dim = None
            if node.args:
                a0 = node.args[0].value
                if isinstance(a0, cst.SimpleString):
                    dim = str(a0.evaluated_value)
                elif isinstance(a0, cst.Integer) and recv.mesh[0]:
                    i = _int(a0)
                    if i is not None and 0 <= i < len(recv.mesh[0]):
                        dim = recv.mesh[0][i]
            dim = dim or recv.submesh
            if dim is None and recv.mesh[0] and len(recv.mesh[0]) == 1:
                dim = recv.mesh[0][0]
            size = None
            if dim and dim in recv.mesh[0]:
                i = recv.mesh[0].index(dim)
                if i < len(recv.mesh[1]):
                    size = recv.mesh[1][i]
            key = f"mesh:{dim}" if dim else "mesh:?"
            if meth == "get_group":
                return Val(group=key, size=size)
            if meth in ("get_local_rank", "get_coordinate"):
                return Val(
                    dims=frozenset({key}),
                    origin=f"`{self.text(node)[:40]}` is the rank within the mesh dimension",
                    group_rank_of=key,
                )
            if meth == "get_rank":
                return Val(dims=frozenset({GLOBAL}), exact=True, origin=f"`{self.text(node)}`")
            if meth in ("size",):
                return CLEAN
        if recv.group is not None:
            if meth == "rank":
                return Val(
                    dims=frozenset({recv.group}),
                    origin=f"`{self.text(node)[:40]}` is the rank within the group",
                    group_rank_of=recv.group,
                )
            if meth == "size":
                return Val(ints=(recv.size,)) if recv.size else CLEAN
        typ = recv.typ
        if typ is None:
            rt = recv_text
            typ = self.table.receivers.get(rt) or self.table.receivers.get(rt.rsplit(".", 1)[-1])
            if typ is None and rt == "self" and self.cls in self.lightning_classes:
                typ = "lightning.LightningModule"
        if typ and typ in self.table.methods:
            fact = self.table.methods[typ].get(meth)
            if fact is not None:
                if fact.when_kw:
                    kw = _kwarg(node, fact.when_kw, None)
                    if kw is None or (isinstance(kw, cst.Name) and kw.value == "False"):
                        return CLEAN
                gkey = f"<{fact.implicit_group}>" if fact.implicit_group else "WORLD"
                v = self._emit_comm(node, fact, gkey, text, via=f"{recv_text}.{meth}")
                return v
        if meth in self.table.executor_methods and node.args:
            low = recv_text.lower()
            if "executor" in low or "pool" in low or typ == "executor":
                return self.spawn(node, "an executor", node.args[0].value)
        if meth in self.table.data_methods and not node.args:
            if recv.uniform:
                return recv
            return as_data(recv, f"`{self.text(node)[:40]}` is this rank's data")
        if meth == "wait":
            return CLEAN
        if meth in ("start", "join", "result") and recv.typ is None:
            return None
        if recv.rank_tensor and meth == "tolist" and not node.args:
            return read_tensor(recv, self.text(node))
        if recv.rank_tensor and meth not in NON_TENSOR_METHODS:
            return replace(join(recv, *args), tensor=True)  # `probe.sum()`, `t.to(...)`
        if recv.tainted() and not recv.uniform:
            return join(recv, *args)
        return None

    def rank_source_val(self, node, rs) -> Val:
        dims = frozenset(rs.get("dims", [GLOBAL]))
        grp_of = None
        if "group" in rs:
            spec = _spec(rs["group"])
            gkey, given = self._group_arg(node, spec)
            if given and gkey != "WORLD":
                dims = frozenset({gkey})
                grp_of = gkey
            elif "group" in dims:
                dims = frozenset({GLOBAL})
        exact = bool(rs.get("exact")) and grp_of is None
        guard = rs.get("guard")
        for d in dims:
            if d != GLOBAL and grp_of is None:
                grp_of = d
        return Val(
            dims=dims,
            exact=exact,
            origin=f"`{self.text(node)[:50]}` is {'the rank' if exact else 'rank-dependent'}",
            guard=guard,
            group_rank_of=grp_of if not exact else None,
        )

    def _group_arg(self, node: cst.Call, spec) -> tuple[str, bool]:
        """The group key of a call's group argument, and whether one was given."""
        if spec is None:
            return "WORLD", False
        arg = _kwarg(node, spec[1], spec[0])
        if arg is None or (isinstance(arg, cst.Name) and arg.value == "None"):
            return "WORLD", False
        v = self._peek(arg)
        if v.group:
            return v.group, True
        t = self.text(arg)
        if isinstance(arg, cst.Name) and arg.value in self._params():
            return f"param:{arg.value}", True
        return t, True

    def _params(self) -> set[str]:
        return getattr(self, "_param_names", set())

    def comm_call(self, node: cst.Call, fact: CallFact, text: str) -> Val:
        if fact.kind == "create":
            return self.create_call(node, fact, text)
        gkey, given = self._group_arg(node, fact.group)
        if fact.implicit_group and not given:
            gkey, given = f"<{fact.implicit_group}>", True
        return self._emit_comm(node, fact, gkey, text, default_group=not given, torch_api=True)

    def _emit_comm(
        self,
        node,
        fact: CallFact,
        gkey: str,
        text: str,
        *,
        via=None,
        default_group=False,
        torch_api=False,
    ) -> Val:
        blocking = True
        if fact.handle:
            blocking = False
        elif fact.async_ is not None:
            a = _kwarg(node, fact.async_[1], fact.async_[0])
            if isinstance(a, cst.Name) and a.value == "True":
                blocking = False
        gval = self._peek(_kwarg(node, fact.group[1], fact.group[0])) if fact.group else CLEAN
        payload = tuple(
            self._peek(a.value).payload or (self.text(a.value), "")
            for a in node.args
            if a.keyword is None and isinstance(a.value, cst.Name | cst.Attribute)
        )
        members = gval.members
        size = gval.size or (len(members) if members else None)
        member_stride = gval.stride if gval.group else None
        root = self._root_fact(node, fact)
        peer_dims = root.dims if root and fact.kind in ("send", "recv") else frozenset()
        rank_set, excluded, rcond = self._restriction()
        comm = Comm(
            kind=fact.kind,
            op=fact.op,
            group=gkey,
            text=text,
            pos=self.pos(node),
            blocking=blocking,
            default_group=default_group,
            torch_api=torch_api,
            root=root,
            peer_dims=peer_dims,
            members=members,
            member_stride=member_stride,
            payload=payload,
            group_size=size,
            rank_set=rank_set,
            rank_excluded=excluded,
            rank_cond=rcond,
            under_divergent=self.divergent_depth > 0,
            in_branch=bool(self.restrict),
            via=via,
        )
        self.emit(comm)
        outs = fact.outputs or ((0,) if fact.op in ("all_reduce", "broadcast") else ())
        for k in outs:
            if k < len(node.args) and node.args[k].keyword is None:
                self.bind_uniform(node.args[k].value)
        if not blocking:
            return Val(typ="handle")
        if fact.functional:
            return Val(uniform=True)
        return CLEAN

    def bind_uniform(self, target) -> None:
        if isinstance(target, cst.Name | cst.Attribute):
            self.bind(target, Val(uniform=True))

    def _restriction(self):
        rank_set = None
        excluded: frozenset[int] | None = None
        rcond = None
        for t, f, c in self.restrict:
            if t is not None:
                rank_set = t if rank_set is None else rank_set & t
                rcond = c
            if f is not None:
                excluded = f if excluded is None else excluded | f
                rcond = rcond or c
        return rank_set, excluded, rcond

    def _root_fact(self, node: cst.Call, fact: CallFact) -> RootFact | None:
        for spec, is_group in ((fact.group_root, True), (fact.root, False)):
            if spec is None:
                continue
            arg = _kwarg(node, spec[1], spec[0])
            if arg is None:
                continue
            v = self._peek(arg)
            lit = v.ints[0] if v.ints and len(v.ints) == 1 else None
            return RootFact(
                param=spec[1] or "root",
                group_param=is_group,
                text=self.text(arg),
                literal=lit,
                dims=v.dims,
                exact=v.exact,
                group_rank_of=v.group_rank_of,
                pos=self.pos(arg),
            )
        return None

    def create_call(self, node: cst.Call, fact: CallFact, text: str) -> Val:
        local = False
        if fact.local_sync is not None:
            a = _kwarg(node, fact.local_sync[1], fact.local_sync[0])
            local = isinstance(a, cst.Name) and a.value == "True"
        if fact.op not in ("init_process_group", "destroy_process_group"):
            self.facts.creates_subgroups = True
        gkey, _ = self._group_arg(node, fact.group)
        rank_set, excluded, rcond = self._restriction()
        op = fact.op
        if fact.ranks is not None:
            # which group is created matters: the same groups in another order also hang
            ranks_arg = _kwarg(node, fact.ranks[1], fact.ranks[0])
            if ranks_arg is not None:
                op = f"{fact.op}({self.text(ranks_arg)[:40]})"
        if not local:
            self.emit(
                Comm(
                    kind="create",
                    op=op,
                    group=gkey,
                    text=text,
                    pos=self.pos(node),
                    rank_set=rank_set,
                    rank_excluded=excluded,
                    rank_cond=rcond,
                    under_divergent=self.divergent_depth > 0,
                )
            )
        if fact.op == "new_group":
            members = None
            stride = None
            if fact.ranks is not None:
                ra = _kwarg(node, fact.ranks[1], fact.ranks[0])
                if ra is not None:
                    v = self._peek(ra)
                    if v.ints is not None:
                        members = frozenset(v.ints)
                    stride = v.stride
            key = self._assign_key(node)
            return Val(
                group=key,
                members=members,
                size=len(members) if members else None,
                stride=stride if members is None else None,
                loop_group=self.loop_depth > 0,
            )
        if fact.op in ("init_device_mesh", "DeviceMesh"):
            names: tuple[str, ...] = ()
            shape: tuple[int, ...] = ()
            dn = _kwarg(node, "mesh_dim_names", None)
            if dn is not None and isinstance(dn, cst.Tuple | cst.List):
                names = tuple(
                    str(e.value.evaluated_value)
                    for e in dn.elements
                    if isinstance(e.value, cst.SimpleString)
                )
            sh = _kwarg(node, "mesh_shape", 1)
            if sh is not None:
                v = self._peek(sh)
                if v.ints:
                    shape = v.ints
            return Val(mesh=(names, shape))
        if fact.op == "new_subgroups":
            return Val(typ="subgroups")
        return CLEAN

    def _assign_key(self, node: cst.Call) -> str:
        """The group key of a `new_group` result: the text of the name it is assigned to."""
        # found by looking at the statement being processed
        return getattr(self, "_current_target", None) or f"new_group@{self.pos(node).line}"


class _ClassEnv(dict):
    """A method's environment: locals, falling back on `self.*` attributes of the class."""

    def __init__(self, base: dict[str, Val], cls: dict[str, Val]) -> None:
        super().__init__(base)
        self.cls = cls

    def get(self, key, default=None):
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return self.cls.get(key, default)

    def __missing__(self, key):
        return self.cls[key]

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or key in self.cls


def _is_single_stage_test(node: cst.BooleanOperation) -> bool:
    names = set()
    for side in (node.left, node.right):
        if not isinstance(side, cst.Call):
            return False
        f = side.func
        names.add(f.attr.value if isinstance(f, cst.Attribute) else getattr(f, "value", ""))
    return names == {"is_pipeline_first_stage", "is_pipeline_last_stage"}


def _is_sentinel(comp: cst.ComparisonTarget) -> bool:
    if not isinstance(comp.operator, cst.Equal | cst.NotEqual | cst.Is | cst.IsNot):
        return False
    c = comp.comparator
    return (isinstance(c, cst.Name) and c.value == "None") or _int(c) == -1


def _spec(raw):
    if raw is None:
        return None
    if isinstance(raw, tuple):
        return raw
    pos, kw = raw
    return (pos, kw)


def _kwarg(node: cst.Call, kw: str | None, pos: int | None) -> cst.BaseExpression | None:
    for a in node.args:
        if a.keyword is not None and kw is not None and a.keyword.value == kw:
            return a.value
    if pos is not None:
        positional = [a for a in node.args if a.keyword is None and not a.star]
        if pos < len(positional):
            return positional[pos].value
    return None


def _flip(op):
    flips = {
        cst.LessThan: cst.GreaterThan,
        cst.GreaterThan: cst.LessThan,
        cst.LessThanEqual: cst.GreaterThanEqual,
        cst.GreaterThanEqual: cst.LessThanEqual,
    }
    for a, b in flips.items():
        if isinstance(op, a):
            return b()
    return op


def _env_key(text: str) -> str | None:
    m = re.fullmatch(r"os\.environ\[\s*['\"]([A-Z_]+)['\"]\s*\]", text)
    return m.group(1) if m else None


class _NameCounter(cst.CSTVisitor):
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def visit_Name(self, node: cst.Name) -> None:
        self.counts[node.value] += 1


def _name_counts(node: cst.CSTNode) -> Counter[str]:
    v = _NameCounter()
    node.visit(v)
    return v.counts


NOQA_RE = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)


def parse_noqa(source: str) -> dict[int, frozenset[str] | None]:
    """Line -> codes suppressed there (None: a blanket `# noqa`). Only comments count: a
    `# noqa` inside a string literal (a test's source text) suppresses nothing."""
    out: dict[int, frozenset[str] | None] = {}
    if "noqa" not in source:
        return out
    candidates = {
        k
        for k, line in enumerate(source.splitlines(), 1)
        if "#" in line and "noqa" in line.lower() and NOQA_RE.search(line)
    }
    if not candidates:
        return out
    comments: dict[int, str] = {}
    try:
        last = max(candidates)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.start[0] > last:
                break
            if tok.type == tokenize.COMMENT and tok.start[0] in candidates:
                comments[tok.start[0]] = tok.string
    except (tokenize.TokenError, SyntaxError):  # CPython compiled it: not expected
        lines = source.splitlines()
        comments = {k: lines[k - 1] for k in candidates}
    for k, text in comments.items():
        m = NOQA_RE.search(text)
        if not m:
            continue
        codes = m.group("codes")
        out[k] = frozenset(c.upper() for c in re.split(r"[\s,]+", codes) if c) if codes else None
    return out


def _swallows_oom(exc: str, handler: str) -> bool:
    """An `except` for running out of memory: `OutOfMemoryError` / `MemoryError`, or a
    `RuntimeError` whose handler tests for "out of memory" (torch before 1.13)."""
    return "MemoryError" in exc or ("RuntimeError" in exc and "out of memory" in handler.lower())


def _lone_call(stmts: Sequence[cst.BaseStatement]) -> bool:
    """One simple statement that is a call, or assigns a call's result, and nothing else."""
    if len(stmts) != 1 or not isinstance(stmts[0], cst.SimpleStatementLine):
        return False
    if len(stmts[0].body) != 1:
        return False
    small = stmts[0].body[0]
    if not isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)):
        return False
    value = small.value
    if not isinstance(value, cst.Call):
        return False
    # arguments that are names, attributes or literals cannot fail on their own
    simple = (cst.Name, cst.Attribute, cst.Integer, cst.Float, cst.SimpleString)
    return all(isinstance(a.value, simple) for a in value.args)


_COMPARE = {
    cst.GreaterThan: lambda a, b: a > b,
    cst.GreaterThanEqual: lambda a, b: a >= b,
    cst.LessThan: lambda a, b: a < b,
    cst.LessThanEqual: lambda a, b: a <= b,
    cst.Equal: lambda a, b: a == b,
    cst.NotEqual: lambda a, b: a != b,
}


def _decided_by_world_size(test: cst.BaseExpression, text) -> bool | None:
    """`world_size > 1` (`args.world_size`, `dist.get_world_size()`) compared with a literal:
    its value whenever communication can go wrong, i.e. on every world size of 2 or more (a
    single rank has nobody to mismatch with); None when that value depends on the size."""
    negate = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negate = test.expression, not negate
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    left, comp = test.left, test.comparisons[0]
    fn = _COMPARE.get(type(comp.operator))
    right = comp.comparator
    if fn is None:
        return None
    if isinstance(right, cst.Integer) and WORLD_SIZE_TEXT.search(text(left)):
        k = int(right.evaluated_value)
        values = {fn(w, k) for w in (2, 3, max(k, 2) + 1, 1 << 20)}
    elif isinstance(left, cst.Integer) and WORLD_SIZE_TEXT.search(text(right)):
        k = int(left.evaluated_value)
        values = {fn(k, w) for w in (2, 3, max(k, 2) + 1, 1 << 20)}
    else:
        return None
    if len(values) != 1 or k > 2:  # beyond 2 the value depends on the size
        return None
    return values.pop() != negate


def _assigned_names(stmts: Sequence[cst.CSTNode]) -> set[str]:
    """Plain names bound by assignments in these statements and the blocks inside them (not
    in nested functions or classes)."""
    out: set[str] = set()

    def targets(t: cst.BaseExpression) -> None:
        if isinstance(t, cst.Name):
            out.add(t.value)
        elif isinstance(t, (cst.Tuple, cst.List)):
            for el in t.elements:
                if isinstance(el, cst.Element):
                    targets(el.value)

    for s in stmts:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        targets(t.target)
                elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                    targets(small.target)
        elif isinstance(s, (cst.FunctionDef, cst.ClassDef)):
            continue
        elif isinstance(s, cst.If):
            out |= _assigned_names(s.body.body)
            if s.orelse is not None:
                out |= _assigned_names(
                    [s.orelse] if isinstance(s.orelse, cst.If) else s.orelse.body.body
                )
        elif isinstance(s, cst.BaseCompoundStatement):
            body = getattr(s, "body", None)
            if isinstance(body, cst.IndentedBlock):
                out |= _assigned_names(body.body)
    return out


def _iterates_a_set(it: cst.BaseExpression) -> bool:
    """`set(x)`, `frozenset(x)`, `{a, b}`, `{k for k in x}` — a set whose elements are not
    evidently integers (whose order, unlike that of strings, is the same in every process)."""
    if isinstance(it, cst.Set):
        return not all(
            isinstance(e.value, cst.Integer) for e in it.elements if isinstance(e, cst.Element)
        )
    if isinstance(it, cst.SetComp):
        return True
    if (
        isinstance(it, cst.Call)
        and isinstance(it.func, cst.Name)
        and it.func.value in ("set", "frozenset")
    ):
        if not it.args:
            return False
        arg = it.args[0].value
        return not (
            isinstance(arg, cst.Call)
            and isinstance(arg.func, cst.Name)
            and arg.func.value == "range"
        )
    return False


def _target_names(f: cst.CompFor) -> list[str]:
    """The names a comprehension's `for` clauses bind."""
    out: list[str] = []
    while f is not None:
        stack = [f.target]
        while stack:
            t = stack.pop()
            if isinstance(t, cst.Name):
                out.append(t.value)
            elif isinstance(t, cst.Tuple | cst.List):
                stack.extend(e.value for e in t.elements)
            elif isinstance(t, cst.StarredElement):
                stack.append(t.value)
        f = f.inner_for_in
    return out


def _int_class_attributes(node: cst.ClassDef) -> dict[str, int]:
    """`NAME = <integer literal>` statements of a class body (`MAIN_PROCESS_RANK = -1`)."""
    out: dict[str, int] = {}
    if not isinstance(node.body, cst.IndentedBlock):
        return out
    for st in node.body.body:
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target, value = small.targets[0].target, _int(small.value)
                if isinstance(target, cst.Name) and value is not None:
                    out[target.value] = value
    return out
