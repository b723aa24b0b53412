"""Qualified names of the names a file uses, from CPython's syntax tree.

LibCST's `ScopeProvider` visited every node of the concrete tree to build its scopes: almost
half of the linter's time on real code, for the few dozen names per file the linter asks
about (a call's callee, a class's bases). The bindings here come from one walk of the `ast`
tree CPython builds anyway (the pre-check compiles every file, and the extractor walks the
same tree), and a name is resolved when asked. The answers are those of LibCST's
`Scope.get_qualified_names_for`, which the linter gave before it read `ast` trees (a test
compares them):

- a name bound by an import → the imported module path (`dist.all_reduce` after `import
  torch.distributed as dist` → `torch.distributed.all_reduce`; relative imports keep their
  dots);
- a name bound in the file → its qualified name (`f.<locals>.x`, `Cls.x`, `x`);
- a builtin → `builtins.NAME`;
- a name bound in the same scope only after the access (`x` read before `x = ...`) resolves
  in the enclosing scope; class scopes are not visible from the functions inside them;
  `global`/`nonlocal` send a binding to the scope they name.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from commlint.lint.ast_walk import inner_children

# binding kinds
IMPORT = "import"
LOCAL = "local"
BUILTIN = "builtin"
DEF = "def"  # a `def` (LibCST's assignment node is the FunctionDef: callbacks look for it)


@dataclass(frozen=True)
class Binding:
    name: str
    at: tuple[int, int]  # (line, column) where it is bound
    kind: str
    # for an import: (module or "", ((real dotted name, alias or None), ...)) of the statement
    imp: tuple[str, tuple[tuple[str, str | None], ...]] | None = None


@dataclass
class Scope:
    kind: str  # module, class, function, lambda, comprehension
    prefix: str  # the qualified-name prefix of what is bound here
    parent: Scope | None = None
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)  # name -> global | nonlocal

    def bind(self, b: Binding) -> None:
        self.bindings.setdefault(b.name, []).append(b)

    def child(self, kind: str, name: str | None) -> Scope:
        if kind == "class":
            prefix = ".".join(x for x in (self.prefix, name) if x)
        elif kind == "comprehension":
            prefix = ".".join(x for x in (self.prefix, "<comprehension>") if x)
        else:
            prefix = ".".join(x for x in (self.prefix, name, "<locals>") if x)
        return Scope(kind, prefix, self)

    # --------------------------------------------------------------- lookup
    def _visible_parent(self) -> Scope | None:
        """The nearest enclosing scope whose names this one sees (class bodies are not seen
        from the functions inside them)."""
        p = self.parent
        while p is not None and p.kind == "class":
            p = p.parent
        return p

    def _target(self, name: str) -> Scope | None:
        """The scope whose binding of `name` an access here sees, None for a builtin."""
        s: Scope | None = self
        while s is not None:
            how = s.overrides.get(name)
            if how == "global":
                s = s._root()
                if name in s.bindings:
                    return s
                return None
            if how == "nonlocal":
                s = s._visible_parent()
                continue
            if s.bindings.get(name):
                return s
            s = s._visible_parent()
        return None

    def _root(self) -> Scope:
        s = self
        while s.parent is not None:
            s = s.parent
        return s

    def lookup(self, name: str) -> tuple[Scope | None, list[Binding]]:
        s = self._target(name)
        return (s, s.bindings[name]) if s is not None else (None, [])

    def _before(self, name: str, at: tuple[int, int]) -> tuple[Scope | None, list[Binding]]:
        """The bindings an access of plain `name` at `at` sees: in this scope only those bound
        before it; if none, the parent's (LibCST asks the direct parent, a class included)."""
        s, found = self.lookup(name)
        if s is not self:
            return s, found
        before = [b for b in found if b.at <= at]  # at == at: the name bound there (walrus)
        if before:
            return s, before
        parent = self.parent
        if parent is None:
            return None, []
        if name not in parent.overrides and parent.bindings.get(name):
            return parent, parent.bindings[name]
        return parent.lookup(name)

    def qualified_names(self, full_name: str, at: tuple[int, int] | None) -> set[tuple[str, str]]:
        """What LibCST's `Scope.get_qualified_names_for` answers for a node whose full name
        is `full_name`, as (name, source) pairs: `at` is the position of a plain name's access
        (its bindings later in the same scope do not count), None for a dotted name (every
        binding counts)."""
        if at is not None and "." not in full_name:
            s, found = self._before(full_name, at)
            if s is None:
                builtin = hasattr(builtins, full_name)
                return {(f"builtins.{full_name}", BUILTIN)} if builtin else set()
            return {q for b in found for q in _names_of(b, s, b.name)}
        prefix: str | None = full_name
        while prefix:
            s, found = self.lookup(prefix)
            if s is not None:
                return {q for b in found for q in _names_of(b, s, full_name)}
            if "." not in prefix and hasattr(builtins, prefix):
                return {(f"builtins.{prefix}", BUILTIN)}
            cut = prefix.rfind(".")
            prefix = prefix[:cut] if cut != -1 else None
        return set()

    def is_import(self, name: str, at: tuple[int, int]) -> bool:
        _, found = self._before(name, at)
        return any(b.kind == IMPORT for b in found)


def _names_of(b: Binding, scope: Scope, full_name: str) -> set[tuple[str, str]]:
    if b.kind != IMPORT:
        return {(f"{scope.prefix}.{full_name}" if scope.prefix else full_name, LOCAL)}
    assert b.imp is not None
    module, aliases = b.imp
    out: set[tuple[str, str]] = set()
    for real, alias in aliases:
        parts = real.split(".")
        for i in range(len(parts), 0, -1):
            real_name = ".".join(parts[:i])
            as_name = alias if alias is not None else real_name
            if module.endswith("."):
                real_name = module + real_name
            elif module:
                real_name = f"{module}.{real_name}"
            if full_name.startswith(as_name):
                rest = full_name[len(as_name) :]
                if rest and not rest.startswith("."):
                    continue
                rest = rest.lstrip(".")
                out.add((f"{real_name}.{rest}" if rest else real_name, IMPORT))
                break
    return out


class Names:
    """Every scope of a module's `ast` tree with its bindings; a function's or class's scope
    found by the line of its `def`/`class` keyword and its name. The same walk measures the
    tree's depth (`depth`, and `deepest_line`, the line of its deepest node), which decides
    whether the file is safe to analyse in this process."""

    def __init__(self, tree: ast.Module) -> None:
        self.module = Scope("module", "")
        self.defs: dict[tuple[int, str], Scope] = {}
        self.depth, self.deepest_line = self._build(tree)

    def scope_of(self, line: int, name: str) -> Scope | None:
        return self.defs.get((line, name))

    # ---------------------------------------------------------------- build
    def _build(self, tree: ast.Module) -> tuple[int, int]:
        """One iterative walk over every node. An item's scope is where what it binds goes:
        None inside a lambda's body or a comprehension (not the linter's concern), a pair
        ("first", scope) for a comprehension's first `for` (its iterable is the enclosing
        scope's)."""
        best, line = 0, 1
        children = inner_children
        stack: list[tuple[ast.AST, object, int, int]] = [(tree, self.module, 1, 1)]
        pop, push = stack.pop, stack.append
        while stack:
            n, scope, depth, at = pop()
            at = getattr(n, "lineno", at)
            if depth > best:
                best, line = depth, at
            d = depth + 1
            kids, leaf_first = children(n)
            if leaf_first and d > best:  # a `Load`, an operator: the first node one level down
                best, line = d, at
            if scope is None:
                for c in kids:
                    push((c, None, d, at))
                continue
            t = type(n)
            if isinstance(scope, tuple):  # a comprehension's first `for`
                outer = scope[1]  # type: ignore[index]
                assert isinstance(n, ast.comprehension)
                for c in kids:
                    push((c, outer if c is n.iter else None, d, at))
                continue
            assert isinstance(scope, Scope)
            if t is ast.FunctionDef or t is ast.AsyncFunctionDef or t is ast.ClassDef:
                inner = self._def(n, scope)  # type: ignore[arg-type]
                body = {id(b) for b in n.body}  # type: ignore[attr-defined]
                for c in reversed(kids):
                    push((c, inner if id(c) in body else scope, d, at))
                continue
            if t is ast.Lambda:
                assert isinstance(n, ast.Lambda)
                push((n.args, scope, d, at))  # defaults: the enclosing scope's
                push((n.body, None, d, at))
                continue
            if t is ast.ListComp or t is ast.SetComp or t is ast.GeneratorExp or t is ast.DictComp:
                first = n.generators[0]  # type: ignore[attr-defined]
                for c in kids:
                    push((c, ("first", scope) if c is first else None, d, at))
                continue
            if t is ast.Name:
                if type(n.ctx) is ast.Store:  # type: ignore[attr-defined]
                    self._bind_local(scope, n.id, (n.lineno, n.col_offset))  # type: ignore[attr-defined]
            elif t is ast.Import or t is ast.ImportFrom:
                self._import(n, scope)  # type: ignore[arg-type]
            elif t is ast.Global or t is ast.Nonlocal:
                how = "global" if t is ast.Global else "nonlocal"
                for name in n.names:  # type: ignore[attr-defined]
                    scope.overrides[name] = how
            elif t is ast.ExceptHandler or t is ast.MatchAs or t is ast.MatchStar:
                if n.name:  # type: ignore[attr-defined]
                    self._bind_local(scope, n.name, (n.lineno, n.col_offset))  # type: ignore[attr-defined]
            elif t is ast.MatchMapping and n.rest:  # type: ignore[attr-defined]
                self._bind_local(scope, n.rest, (n.lineno, n.col_offset))  # type: ignore[attr-defined]
            for c in reversed(kids):  # in source order: `global x` before `x = 1`
                push((c, scope, d, at))
        return best, line

    def _def(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, scope: Scope
    ) -> Scope:
        """The scope `node` opens (its parameters bound), its name bound in `scope`."""
        at = (node.lineno, node.col_offset)
        key = (node.lineno, node.name)
        if isinstance(node, ast.ClassDef):
            inner = scope.child("class", node.name)
            self.defs[key] = inner
            scope.bind(Binding(node.name, at, LOCAL))
            return inner
        found = self.defs.get(key)  # a second def of the same name on one line shares it
        inner = found if found is not None else scope.child("function", node.name)
        self.defs[key] = inner
        args = node.args
        for p in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if p is not None:
                inner.bind(Binding(p.arg, (node.lineno, -1), LOCAL))
        scope.bind(Binding(node.name, at, DEF))
        return inner

    def _import(self, n: ast.Import | ast.ImportFrom, scope: Scope) -> None:
        at = (n.lineno, n.col_offset)
        if isinstance(n, ast.Import):
            for a in n.names:
                imp = ("", ((a.name, a.asname),))
                if a.asname:
                    self._bind(scope, Binding(a.asname, at, IMPORT, imp))
                    continue
                parts = a.name.split(".")
                for i in range(len(parts), 0, -1):
                    self._bind(scope, Binding(".".join(parts[:i]), at, IMPORT, imp))
            return
        module = "." * n.level + (n.module or "")
        aliases = tuple((a.name, a.asname) for a in n.names if a.name != "*")
        for a in n.names:
            if a.name != "*":
                self._bind(scope, Binding(a.asname or a.name, at, IMPORT, (module, aliases)))

    def _bind_local(self, scope: Scope, name: str, at: tuple[int, int]) -> None:
        self._bind(scope, Binding(name, at, LOCAL))

    def _bind(self, scope: Scope, b: Binding) -> None:
        """In `scope`, or where its `global`/`nonlocal` sends the name."""
        name = b.name
        how = scope.overrides.get(name)
        target = scope
        if how == "global":
            target = self.module
        elif how == "nonlocal":
            p = scope._visible_parent()
            while p is not None and name not in p.bindings and p.parent is not None:
                p = p._visible_parent()
            target = p or scope
        target.bind(b)


def comprehension_scope(parent: Scope, targets: list[str]) -> Scope:
    """The scope of a comprehension (its `for` targets), for the names used inside it."""
    s = parent.child("comprehension", None)
    for name in targets:
        s.bind(Binding(name, (0, 0), LOCAL))
    return s
