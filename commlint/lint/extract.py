"""A file's `ast` tree -> `FileFacts`: per function, the tree of communication it performs.

One pass over each function body, in source order, with a small abstract environment that
tracks which values depend on the rank (and along which group dimension), on data, which
values are process groups (and their literal members), meshes, wrapped modules and library
objects whose methods communicate. Nothing is imported or run.

`Extractor` is assembled from one mixin per concern: statements (`extract_stmts`), expressions
and conditions (`extract_exprs`), calls (`extract_calls`); the value vocabulary (`Val`,
`join`) is in `extract_values`, questions about bare syntax in `extract_syntax`, positions and
texts as findings report them in `source_map`.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from typing import Any, ClassVar

from commlint.lint.extract_agreement import returned
from commlint.lint.extract_calls import Calls
from commlint.lint.extract_exprs import Expressions
from commlint.lint.extract_stmts import Statements
from commlint.lint.extract_syntax import _name_counts, _name_of
from commlint.lint.extract_values import CLEAN, GLOBAL, Val, _ClassEnv
from commlint.lint.ir import AsyncFact, Cond, FileFacts, Function, Pos
from commlint.lint.names import Names, Scope
from commlint.lint.source_map import SourceMap
from commlint.lint.table import ApiTable

# What other modules read from here (the engine, the tests); the value vocabulary is
# re-exported from `extract_values`.
__all__ = ["CLEAN", "GLOBAL", "NOQA_RE", "Extractor", "Val", "parse_noqa"]


def _full_name(node: ast.AST) -> str | None:
    """The dotted name a callee or base is written as (`dist.all_reduce`, `a.b` of
    `a.b[0]` and of `a.b(x)`); "None" stands for what has no name (`"".join` → `None.join`)."""
    name = _name_of(node)
    if name is not None:
        return name
    if isinstance(node, ast.Attribute):
        return f"{_full_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _full_name(node.func)
    if isinstance(node, ast.Subscript):
        return _full_name(node.value)
    return None


class Extractor(Statements, Expressions, Calls):
    """One file's `ast` tree -> its `FileFacts` (`run`)."""

    _dispatch: ClassVar[dict[type, Any]] = {}  # node type -> its `ex_` method
    _stmt_dispatch: ClassVar[dict[type, Any]] = {}  # statement type -> its `stmt_` method

    def __init__(
        self,
        path: str,
        module_name: str,
        source: str,
        table: ApiTable,
        names: Names | None = None,
        tree: ast.Module | None = None,
    ) -> None:
        self.path = path
        self.names = names
        self.tree = tree
        self.module_name = module_name
        self.source = source
        self.table = table
        self.facts = FileFacts(path=path, module=module_name, functions={})
        self.module_env: dict[str, Val] = {}
        self.class_envs: dict[str, dict[str, Val]] = {}
        self.lightning_classes: set[str] = set()
        self._last: dict[int, tuple[ast.AST, Val]] = {}  # id(node) -> (node, last value)
        self._args: dict[int, tuple[ast.Call, list]] = {}  # id(call) -> (call, its arguments)

    # ---------------------------------------------------------------- entry
    def run(self) -> FileFacts:
        # one tree for the pre-check, the names and this walk: CPython's
        module = self.tree if self.tree is not None else ast.parse(self.source)
        self.tree = None
        self.module = module
        if self.names is None:
            self.names = Names(module)
        self.scope: Scope = self.names.module
        self._qn_cache: dict[int, list[str]] = {}
        self._src = SourceMap(self.source)
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
    def qnames(self, node: ast.AST) -> list[str]:
        key = id(node)
        hit = self._qn_cache.get(key)
        if hit is not None:
            return hit
        full = _full_name(node)
        names: list[str] = []
        if full is not None:
            at = self._at(node) if _name_of(node) is not None else None
            names = sorted(q.lstrip(".") for q, _ in self.scope.qualified_names(full, at))
        self._qn_cache[key] = names
        return names

    def _at(self, node: ast.AST) -> tuple[int, int]:
        return (node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def pos(self, node: ast.AST) -> Pos:
        line, col, end_line, end_col = self._src.pos(node)
        return Pos(line, col + 1, end_line, end_col + 1, self.stmt_line)

    def text(self, node: ast.AST) -> str:
        return self._src.text(node)

    def statement_text(self, node: ast.stmt) -> str:
        """A simple statement's code, with the `;` that ends it if one does."""
        t = self._src.text(node)
        return t + ";" if self._src.semicolon_after(node) else t

    # ----------------------------------------------------------- functions
    def _queue_function(self, node: ast.FunctionDef, prefix: str, env_parent, class_key) -> None:
        self.pending.append((node, prefix, env_parent, class_key))

    def _do_function(self, node: ast.FunctionDef, prefix: str, parent_env, class_key) -> None:
        name = node.name
        qualname = f"{prefix}{name}"
        env: dict[str, Val]
        if isinstance(parent_env, _ClassEnv):
            outer = parent_env.outer
            env = _ClassEnv(self.module_env if outer is None else outer, parent_env.cls)
        else:
            env = dict(parent_env)
        params: list[str] = []
        defaults: dict[str, str] = {}
        p = node.args
        positional = [*p.posonlyargs, *p.args]
        given = dict(zip(positional[len(positional) - len(p.defaults) :], p.defaults, strict=True))
        given.update(
            (a, d) for a, d in zip(p.kwonlyargs, p.kw_defaults, strict=True) if d is not None
        )
        for param in [*positional, *p.kwonlyargs]:
            pname = param.arg
            params.append(pname)
            default = given.get(param)
            if default is not None:
                defaults[pname] = self.text(default)
            env[pname] = self._name_val(pname, pname) or Val(
                module_ref=(("param", f"{self.module_name}.{qualname}", pname),)
            )
        for star in (p.vararg, p.kwarg):
            if star is not None:
                env[star.arg] = CLEAN
        rank_guard = None
        for dec in node.decorator_list:
            dname = self.text(dec).split("(")[0]
            if dname.rsplit(".", 1)[-1] in self.table.rank_zero_decorators:
                self.stmt_line = dec.lineno
                rank_guard = Cond(
                    text=f"@{dname}",
                    pos=self.pos(dec),
                    dims=frozenset({GLOBAL}),
                    origin=f"`@{dname}` runs the function on one rank only",
                    true_ranks=frozenset({0}),
                    decorator=True,
                )
        self._function_body(
            key=f"{self.module_name}.{qualname}",
            name=name,
            qualname=qualname,
            stmts=node.body,
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
            getattr(self, "loop_roots", {}),
            getattr(self, "last_forward", None),
        )
        if isinstance(fnode, ast.FunctionDef | ast.AsyncFunctionDef):
            found = self.names.scope_of(fnode.lineno, fnode.name)
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
        self.loop_roots = {}
        self.last_forward = None  # where the last wrapped module called here came from
        body = self.block(stmts)
        func = Function(
            key=key,
            name=name,
            qualname=qualname,
            path=self.path,
            pos=self.pos(fnode) if not isinstance(fnode, ast.Module) else Pos(1, 1, 1, 1, 1),
            params=params,
            param_defaults=defaults,
            body=body,
            rank_guard=rank_guard,
            returns_rank=frozenset().union(*(v.dims for v in self.returns))
            if self.returns
            else frozenset(),
            **returned(self.returns),
            returns_module=_module_refs(self.returns),
            wraps_params=_wrapped_params(key, params, env),
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
            self.loop_roots,
            self.last_forward,
        ) = saved
        return func


def _dispatch_table(prefix: str) -> dict[type, object]:
    """`ex_Call` → {ast.Call: Extractor.ex_Call}: the method for each node type."""
    out: dict[type, object] = {}
    for attr in dir(Extractor):
        if attr.startswith(prefix):
            node_type = getattr(ast, attr[len(prefix) :], None)
            if isinstance(node_type, type):
                out[node_type] = getattr(Extractor, attr)
    return out


Extractor._dispatch = _dispatch_table("ex_")
Extractor._stmt_dispatch = _dispatch_table("stmt_")


def _module_refs(vals: list[Val]) -> tuple[tuple, ...]:
    """Where the modules a function returns came from (`ModuleCall.refs`)."""
    refs: list[tuple] = []
    for v in vals:
        if v.typ and v.typ.startswith("wrapped:"):
            refs.append(("typ", v.typ))
        refs.extend(v.module_ref)
    return tuple(dict.fromkeys(refs))[:8]


def _wrapped_params(key: str, params: tuple[str, ...], env) -> tuple:
    """The parameters whose module the function wrapped (`fully_shard(model)`, or its
    blocks) or handed to a helper that may: what the caller's object becomes."""
    out = []
    for p in params:
        v = dict.get(env, p)
        if v is None:
            continue
        if v.typ and v.typ.startswith("wrapped:"):
            out.append((p, (("typ", v.typ),)))
            continue
        refs = tuple(r for r in v.module_ref if r[0] == "inplace")
        if refs:
            out.append((p, refs))
    return tuple(out)


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
