"""Interprocedural analysis over every file passed: function summaries and branch comparison.

A function's summary is the sequence of communication tokens it issues (callees inlined,
group parameters substituted). A branch whose condition can differ between ranks is compared
arm by arm, projected on each process group (PARCOACH): it matters only when the arms lead
to different sequences on a group that the condition splits.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import PurePath

from commlint.lint.ir import (
    Branch,
    CallSite,
    Comm,
    Cond,
    Exit,
    FileFacts,
    Function,
    Loop,
    ModuleCall,
    Node,
    Pos,
    Spawn,
    Try,
    iter_nodes,
)
from commlint.lint.table import ApiTable

GLOBAL = "global"
MAX_DEPTH = 8
MAX_TOKENS = 512


@dataclass(frozen=True)
class Tok:
    """One communication step as seen from a function (callees inlined)."""

    cat: str  # coll | create | p2p | alt | loop
    op: str
    group: str
    path: str
    pos: Pos  # where it happens in the function being analysed (the call or the comm)
    leaf: str  # the real call and where it is, e.g. "dist.barrier (utils.py:88)"
    chain: tuple[str, ...] = ()
    kids: tuple[tuple[Tok, ...], ...] = ()
    p2p: str | None = None  # send | recv | batch
    blocking: bool = True
    peer_dims: frozenset[str] = frozenset()
    root: str | None = None  # `src=0`: the root as written (a literal: its value), if known
    payload: tuple[tuple[str, str], ...] = ()  # what each buffer argument was made from
    no_group: bool = False  # a torch.distributed call that was given no `group=`
    # the forward of the module this function's parameter holds (`ModuleCall`): a caller
    # that hands over a module not known to be wrapped drops it (`rebase`)
    module_param: str | None = None

    def key(self) -> tuple:
        if self.cat in ("alt", "loop"):
            return (self.cat, tuple(tuple(t.key() for t in k) for k in self.kids))
        return (self.cat, self.op, self.group, self.p2p)

    def describe(self) -> str:
        via = f" via {' → '.join(self.chain)}" if self.chain else ""
        return f"{self.leaf}{via}"


@dataclass
class RawFinding:
    code: str
    message: str
    path: str
    pos: Pos
    fix: str
    related: list[tuple[str, Pos, str]] = field(default_factory=list)
    # About the buffers' dtype or size (one arm converts or pads): the per-rank evaluation
    # does not know data tensors' dtypes and sizes, so it cannot refute such a finding.
    payload: bool = False


def short(path: str) -> str:
    return PurePath(path).name


def module_name(path: str) -> str:
    p = PurePath(path)
    parts = [x for x in p.with_suffix("").parts if x not in ("", ".", "..", "/")]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__main__"


class Program:
    """Every file's facts, with summaries computed on demand."""

    def __init__(self, files: list[FileFacts], table: ApiTable, options: dict | None = None):
        self.files = [
            f for f in files if not f.skipped and f.syntax_error is None and not f.internal_error
        ]
        self.all_files = files  # skipped ones too: the per-rank evaluator follows imports into them
        self.table = table
        self.options = options or {}
        self.functions: dict[str, Function] = {}
        self.index: dict[str, list[str]] = {}
        self.methods: dict[str, list[tuple[str, str]]] = {}  # method -> (class, key)
        for f in self.files:
            for key, fn in f.functions.items():
                self.functions[key] = fn
                cls, dot, meth = fn.qualname.partition(".")
                if dot and "." not in meth:
                    self.methods.setdefault(meth, []).append((cls, key))
                mod_parts = f.module.split(".")
                for k in range(len(mod_parts)):
                    name = ".".join(mod_parts[k:]) + "." + fn.qualname
                    self.index.setdefault(name, []).append(key)
        self._summary: dict[str, list[Tok]] = {}
        self._in_progress: set[str] = set()
        self._node_toks: dict[int, list[Tok]] = {}
        # may_exit's memo: (exit, condition, function, call chain) or None, per function key
        self._may_exit: dict[str, tuple[Exit, Cond, Function, tuple[str, ...]] | None] = {}
        self._membership: dict[tuple[str, str], tuple | None] = {}  # membership()'s memo
        self._branch_findings: list[RawFinding] | None = None  # perrank_check.branch_findings()'s
        self._perrank: dict | None = None  # perrank_check.verdicts()'s, per file
        self._has_p2p: bool | None = None
        self._classes: dict[str, list] | None = None  # simple class name -> (key, info)
        self._taint_lines: set[tuple[str, int]] | None = None  # perrank_check's dedup memo
        self.siblings: dict[int, tuple[list[Node], int]] = {}
        self._compensation: dict[tuple, object] = {}  # branches._compensated()'s memo
        self.group_dims: dict[str, frozenset[str]] = {}
        for g in table.group_getters.values():
            if "group" in g:
                self.group_dims[g["group"]] = frozenset(g.get("dims") or [g["group"]])

    # ------------------------------------------------------------ resolution

    def has_p2p(self) -> bool:
        """Whether any function sends or receives point to point (a p2p token comes only
        from such a call: a program without one has nothing for the p2p rules to pair)."""
        if self._has_p2p is None:
            self._has_p2p = any(
                isinstance(n, Comm) and n.kind in ("send", "recv", "batch")
                for fn in self.functions.values()
                for n in iter_nodes(fn.body)
            )
        return self._has_p2p

    def resolve(self, site: CallSite) -> Function | None:
        for cand in site.names:
            keys = self.index.get(cand)
            if keys:
                return self.functions[sorted(keys)[0]]
        if site.on_module:
            return None
        for cand in site.names:
            found = self._method_of_named_object(cand)
            if found is not None:
                return found
        return None

    def _method_of_named_object(self, cand: str) -> Function | None:
        """`tracker.log_epoch()` on an object of unknown type: the one method of that name
        in the checked code whose class is named after the variable (`Tracker`,
        `MetricsTracker`). Anything less certain stays unresolved."""
        var, dot, meth = cand.partition(".")
        if not dot or "." in meth or var == "self":
            return None
        stem = var.strip("_").lower()
        if len(stem) < 3:
            return None
        hits = [key for cls, key in self.methods.get(meth, ()) if stem in cls.lower()]
        return self.functions[hits[0]] if len(hits) == 1 else None

    def returns_rank(self, deps: tuple[str, ...]) -> frozenset[str]:
        dims: frozenset[str] = frozenset()
        for d in deps:
            keys = self.index.get(d)
            if keys:
                dims |= self.functions[sorted(keys)[0]].returns_rank
        return dims

    def agreed(self, sources, depth: int = 0) -> bool:
        """A value that a collective may have made the same on every rank
        (`extract_agreement`) is: one of its sources returns a collective's result (`()`:
        seen in its own function) and the calls it needs clean return nothing of the
        rank's own."""
        return any(
            (not names or self._returns_agreed(names, depth))
            and all(self._clean(n, depth) for n in needs)
            for names, needs in sources
        )

    def _callee(self, names: tuple[str, ...]) -> Function | None:
        for name in names:
            keys = self.index.get(name)
            if keys:
                return self.functions[sorted(keys)[0]]
        return None

    def _in_project(self, names: tuple[str, ...]) -> bool:
        """A name of one of the checked modules that no extracted function answers to (a
        file the prefilter skipped, a class's method): the project's code, unseen."""
        modules = self.__dict__.get("_modules")
        if modules is None:
            modules = self.__dict__["_modules"] = {f.module for f in self.all_files if f.module}
        for name in names:
            head = name
            while "." in head:
                head = head.rsplit(".", 1)[0]
                if head in modules:
                    return True
        return False

    def _returns_agreed(self, names: tuple[str, ...], depth: int) -> bool:
        fn = self._callee(names)
        return fn is not None and self._fn_returns_agreed(fn, depth)

    def _fn_returns_agreed(self, fn: Function, depth: int) -> bool:
        if fn.returns_sources is None:
            return False
        return self._answer(
            ("agreed", fn.key),
            depth,
            lambda: all(self.agreed(s, depth + 1) for s in fn.returns_sources or ()),
        )

    def _clean(self, names: tuple[str, ...], depth: int) -> bool:
        """The project function `names` returns nothing of the rank's own (a name of no
        checked module is a library's, which computes from what it is handed)."""
        fn = self._callee(names)
        if fn is None:
            return not self._in_project(names)
        return self._answer(("clean", fn.key), depth, lambda: self._check_clean(fn, depth))

    def _check_clean(self, fn: Function, depth: int) -> bool:
        if fn.returns_rank:
            return False
        if fn.returns_clean and all(self._clean(n, depth + 1) for n in fn.returns_through):
            return True
        return self._fn_returns_agreed(fn, depth + 1)

    def _answer(self, key: tuple[str, str], depth: int, decide) -> bool:
        """Memoised; a question met again while it is being answered (recursion), or too
        deep, is answered no."""
        memo = self.__dict__.setdefault("_agreement_memo", {})
        if key in memo:
            return bool(memo[key])
        if depth > 12:
            return False
        memo[key] = None  # being answered
        memo[key] = decide()
        return memo[key]

    def effective(self, cond: Cond | None) -> Cond | None:
        if cond is None:
            return None
        if cond.data and not cond.dims and cond.agreed_if and self.agreed(cond.agreed_if[0]):
            # read from values a collective made the same on every rank
            cond = replace(cond, data=False)
        if not cond.divergent and cond.deps:
            dims = self.returns_rank(cond.deps)
            if dims:
                return replace(cond, dims=dims, origin=cond.origin or "a helper returns a rank")
        if cond.vs_attr is not None:
            _op, name, cls = cond.vs_attr  # == or !=: one value on every rank either way
            value = self.class_constant(cls, name)
            if value is not None and value < 0:
                # no rank is negative (`MAIN_PROCESS_RANK = -1`, the launcher): the test
                # takes one value on every rank
                return replace(cond, dims=frozenset(), true_ranks=None, false_ranks=None)
        return cond

    def class_constant(self, cls: str, name: str, depth: int = 0) -> int | None:
        """An integer class attribute of `cls` or of its bases, across the project's files
        (bases named as the file imports them, found by their qualified name's suffix)."""
        if self._classes is None:
            self._classes = {}
            for f in self.files:
                for key, info in f.classes.items():
                    self._classes.setdefault(key.rsplit(".", 1)[-1], []).append((key, info))
        found = [info for key, info in self._classes.get(cls.rsplit(".", 1)[-1], []) if key == cls]
        if not found or depth > 10:
            return None
        bases, consts = found[0]
        if name in consts:
            return consts[name]
        for base in bases:
            cands = [
                key
                for key, _info in self._classes.get(base.rsplit(".", 1)[-1], [])
                if key == base or key.endswith("." + base) or base.endswith("." + key)
            ]
            if len(cands) == 1:
                value = self.class_constant(cands[0], name, depth + 1)
                if value is not None:
                    return value
        return None

    # ------------------------------------------------------- wrapped modules
    def wrapper_of(self, refs: tuple[tuple, ...], depth: int = 0) -> str | None:
        """The wrapper (`wrapped:<op>:<group>`) of a module that came from `refs`
        (`ModuleCall`): a helper that returns it wrapped, a helper it was handed to that wraps
        it in place, or — for a parameter — what some caller hands over. None: not wrapped,
        or not known to be."""
        memo = self.__dict__.setdefault("_wrappers", {})
        if refs in memo:
            return memo[refs]
        memo[refs] = None  # a cycle answers "not known"
        found = None
        if depth <= MAX_DEPTH:
            for ref in refs:
                found = self._wrapper_of_ref(ref, depth)
                if found is not None:
                    break
        memo[refs] = found
        return found

    def _wrapper_of_ref(self, ref: tuple, depth: int) -> str | None:
        kind = ref[0]
        if kind == "typ":
            return ref[1]
        if kind == "returns":
            callee = self._callee(ref[1])
            return self.wrapper_of(callee.returns_module, depth + 1) if callee else None
        if kind == "inplace":
            callee = self._callee(ref[1])
            if callee is None:
                return None
            name = _param_of_slot(callee, ref[2])
            refs = dict(callee.wraps_params).get(name) if name else None
            return self.wrapper_of(refs, depth + 1) if refs else None
        if kind == "param":
            fn = self.functions.get(ref[1])
            if fn is None:
                return None
            slot = _slot_of_param(fn, ref[2])
            for site in self.callers(fn.key):
                refs = site.module_args.get(ref[2]) or site.module_args.get(slot or "")
                if refs:
                    found = self.wrapper_of(refs, depth + 1)
                    if found is not None:
                        return found
        return None

    def callers(self, key: str) -> list[CallSite]:
        """The call sites, anywhere in the checked code, that resolve to function `key`."""
        index = self.__dict__.get("_callers")
        if index is None:
            index = self.__dict__["_callers"] = {}
            for f in self.files:
                for fn in f.functions.values():
                    for n in iter_nodes(fn.body):
                        if isinstance(n, CallSite) and n.module_args:
                            # `Trainer(model)` hands the module to `Trainer.__init__`
                            callee = self.resolve(n) or self._callee(
                                tuple(f"{name}.__init__" for name in n.names)
                            )
                            if callee is not None:
                                index.setdefault(callee.key, []).append(n)
        return index.get(key, [])

    # ------------------------------------------------------------- summaries
    def summary(self, fn: Function) -> list[Tok]:
        if fn.key in self._summary:
            return self._summary[fn.key]
        if fn.key in self._in_progress or len(self._in_progress) > MAX_DEPTH:
            return []
        self._in_progress.add(fn.key)
        try:
            # a bound on the inlined sequence keeps deep call trees linear; the prefix is
            # what branch comparison looks at first
            toks = self.tokens(fn.body, fn)[:MAX_TOKENS]
        finally:
            self._in_progress.discard(fn.key)
        self._summary[fn.key] = toks
        return toks

    def tokens(self, nodes: list[Node], fn: Function) -> list[Tok]:
        out: list[Tok] = []
        for n in nodes:
            out.extend(self.node_tokens(n, fn))
        return out

    def live_arms(self, n: Branch, fn: Function) -> list[list[Tok]]:
        """The tokens of a branch's arms, less the arms that raise (`else: raise
        RuntimeError("unknown rank")`) whose calls before the raise are where every other arm
        begins: a rank that raises ends, and the launcher stops the job (a crash with a
        traceback, not a hang), so what the others do past that point is not its to match."""
        arms = [self.tokens(a, fn) for a in n.arms]
        crash = [i for i, a in enumerate(n.arms) if any(_raises(x) for x in a)]
        if not crash or len(crash) == len(arms):
            return arms
        live = [a for i, a in enumerate(arms) if i not in crash]
        for i in crash:
            before = n.arms[i][: next(k for k, x in enumerate(n.arms[i]) if _raises(x))]
            head = [t.key() for t in self.tokens(before, fn)]
            if any([t.key() for t in a[: len(head)]] != head for a in live):
                return arms  # it communicates differently before it raises: compared as is
        return live

    def collectives(self, nodes: list[Node], fn: Function) -> list[Tok]:
        """The tokens of `nodes` whose first real call is a collective."""
        return [t for t in self.tokens(nodes, fn) if leaf_tok(t).cat == "coll"]

    def node_tokens(self, n: Node, fn: Function) -> list[Tok]:
        cached = self._node_toks.get(id(n))
        if cached is not None:
            return cached
        toks = self._node_tokens(n, fn)
        if not isinstance(n, CallSite) or not self._in_progress:
            self._node_toks[id(n)] = toks
        return toks

    def _node_tokens(self, n: Node, fn: Function) -> list[Tok]:
        if isinstance(n, Comm):
            if n.op == "destroy_process_group":
                return []  # tearing down at the end creates nothing a peer waits for
            return [self.comm_tok(n, fn.path)]
        if isinstance(n, CallSite):
            callee = self.resolve(n)
            if callee is None or callee.key == fn.key:
                return []
            inner = self.summary(callee)
            if not inner:
                return []
            mapping = self._group_mapping(n, callee)
            if _has_module_param(inner):
                mapping.update(self._module_mapping(n, callee, fn))
            rebased = (self.rebase(t, n, fn.path, mapping) for t in inner)
            return [t for t in rebased if t is not None]
        if isinstance(n, Branch):
            arms = self.live_arms(n, fn)
            keys = [tuple(t.key() for t in a) for a in arms]
            if all(k == keys[0] for k in keys):
                return arms[0]
            # a group created under an ordinary condition is lazy initialisation
            # (`if _GROUP is None: _GROUP = new_group(...)`): it does not follow the caller
            arms = [[t for t in a if t.cat != "create"] for a in arms]
            keys = [tuple(t.key() for t in a) for a in arms]
            if all(k == keys[0] for k in keys):
                return arms[0]
            first = next(t for a in arms for t in a)
            return [
                Tok(
                    "alt",
                    "branch",
                    "",
                    fn.path,
                    first.pos,
                    first.leaf,
                    first.chain,
                    tuple(tuple(a) for a in arms),
                )
            ]
        if isinstance(n, Loop):
            body = self.tokens(n.body, fn)
            if not body:
                return []
            return [
                Tok(
                    "loop",
                    "loop",
                    "",
                    fn.path,
                    body[0].pos,
                    body[0].leaf,
                    body[0].chain,
                    (tuple(body),),
                )
            ]
        if isinstance(n, Try):
            return self.tokens(n.body, fn) + self.tokens(n.orelse, fn) + self.tokens(n.final, fn)
        if isinstance(n, ModuleCall):
            typ = self.wrapper_of(n.refs)
            if typ is None:
                return []
            _, op, group = typ.split(":", 2)
            if n.backward:
                op = "backward (FSDP reduce-scatter)" if "FSDP" in op else "backward (all-reduce)"
            leaf = f"{n.text} ({short(fn.path)}:{n.pos.line})"
            own = [r[2] for r in n.refs if r[0] == "param" and r[1] == fn.key]
            param = own[0] if len(own) == len(n.refs) == 1 else None
            return [Tok("coll", op, group, fn.path, n.pos, leaf, module_param=param)]
        if isinstance(n, Spawn):
            # a thread's collectives are this rank's too: a thread started on some ranks only
            # leaves the others without the partner of its collectives (when, among the main
            # thread's, is CL112's question)
            return self._node_tokens(n.target, fn)
        return []

    def comm_tok(self, c: Comm, path: str) -> Tok:
        leaf = f"{c.text} ({short(path)}:{c.pos.line})"
        if c.kind in ("send", "recv", "batch"):
            return Tok(
                "p2p",
                c.op,
                c.group,
                path,
                c.pos,
                leaf,
                p2p=c.kind,
                blocking=c.blocking,
                peer_dims=c.peer_dims,
                payload=c.payload,
                root=root_of(c),
            )
        cat = "create" if c.kind == "create" else "coll"
        return Tok(
            cat,
            c.op,
            c.group,
            path,
            c.pos,
            leaf,
            blocking=c.blocking,
            root=root_of(c),
            payload=c.payload,
            no_group=c.default_group and c.torch_api,
        )

    def _group_mapping(self, site: CallSite, callee: Function) -> dict[str, str]:
        params = list(callee.params)
        offset = 1 if params and params[0] in ("self", "cls") else 0
        mapping: dict[str, str] = {}
        for k, name in enumerate(params[offset:]):
            if f"#{k}" in site.group_args:
                mapping[name] = site.group_args[f"#{k}"]
            elif name in site.group_args:
                mapping[name] = site.group_args[name]
            else:
                d = callee.param_defaults.get(name)
                if d is None or d == "None":
                    mapping[name] = "WORLD"
                else:
                    mapping[name] = d
        return mapping

    def rebase(self, t: Tok, site: CallSite, path: str, mapping: dict[str, str]) -> Tok | None:
        """`t` seen from the caller at `site`; None past MAX_DEPTH calls. The bound holds
        whatever order the summaries are computed in (a chain of n helpers, each calling the
        previous one, otherwise carries tokens n calls deep: O(n^2) rebasing)."""
        if len(t.chain) >= MAX_DEPTH:
            return None
        group = t.group
        if group.startswith("param:"):
            group = mapping.get(group[6:], group)
        module_param = t.module_param
        if module_param is not None:
            handed = mapping.get(f"module:{module_param}")
            if handed == "":
                return None  # this caller hands over a module not known to be wrapped
            if handed is not None and handed.startswith("param:"):
                module_param = handed[6:]  # the caller's own parameter: its callers decide
            elif handed is not None:
                _, _, group = handed.split(":", 2)
                module_param = None
        kids = tuple(
            tuple(r for r in (self.rebase(k, site, path, mapping) for k in arm) if r is not None)
            for arm in t.kids
        )
        if t.kids and not any(kids):
            return None  # nothing of it communicates from this caller
        return replace(
            t,
            group=group,
            path=path,
            pos=site.pos,
            chain=(f"{site.text}()", *t.chain),
            kids=kids,
            module_param=module_param,
        )

    def _module_mapping(self, site: CallSite, callee: Function, fn: Function) -> dict[str, str]:
        """What `site` hands to each of the callee's parameters, for the forwards of the
        modules they hold: `module:p` -> the wrapper, "" (not known wrapped), or `param:q`
        (the caller's own parameter q)."""
        out: dict[str, str] = {}
        for k, p in enumerate(callee.params):
            slot = _slot_of_param(callee, p)
            refs = site.module_args.get(p) or site.module_args.get(slot or f"#{k}") or ()
            own = [r[2] for r in refs if r[0] == "param" and r[1] == fn.key]
            if own and len(own) == len(refs):
                out[f"module:{p}"] = f"param:{own[0]}"
                continue
            out[f"module:{p}"] = (self.wrapper_of(refs) if refs else None) or ""
        return out

    # ------------------------------------------------------------ projection
    def groups_of(self, toks: list[Tok] | tuple[Tok, ...]) -> list[str]:
        seen: dict[str, None] = {}
        for t in toks:
            if t.cat in ("coll", "create"):
                seen.setdefault(t.group, None)
            for arm in t.kids:
                for g in self.groups_of(arm):
                    seen.setdefault(g, None)
        return list(seen)

    def project(self, toks, group: str) -> list[Tok]:
        out: list[Tok] = []
        for t in toks:
            if t.cat in ("coll", "create"):
                if t.group == group:
                    out.append(t)
            elif t.cat == "alt":
                arms = [self.project(a, group) for a in t.kids]
                keys = [tuple(x.key() for x in a) for a in arms]
                if all(k == keys[0] for k in keys):
                    out.extend(arms[0])
                else:
                    first = next(x for a in arms for x in a)
                    out.append(
                        replace(
                            t,
                            kids=tuple(tuple(a) for a in arms),
                            pos=first.pos,
                            leaf=first.leaf,
                            chain=first.chain,
                        )
                    )
            elif t.cat == "loop":
                body = self.project(t.kids[0], group)
                if body:
                    out.append(
                        replace(
                            t,
                            kids=(tuple(body),),
                            pos=body[0].pos,
                            leaf=body[0].leaf,
                            chain=body[0].chain,
                        )
                    )
        return out

    def divergent(self, cond: Cond, group: str, fn: Function | None = None) -> bool:
        if cond.data:
            return True
        if not cond.dims:
            return False
        if cond.guard and group != "WORLD" and cond.guard in ("*", group):
            return False
        if fn is not None and group != "WORLD":
            known = self.membership(fn, group)
            if known is not None and same_on_members(cond, *known):
                return False
        if GLOBAL in cond.dims or group == "WORLD":
            return True
        gd = self.group_dims.get(group) or _mesh_dims(group)
        return bool(cond.dims & gd)

    def membership(
        self, fn: Function, group: str
    ) -> tuple[frozenset[int] | None, tuple[int, int | None] | None] | None:
        """What `fn`'s own calls on `group` know of its members: literal ranks or a residue
        class; None when unknown or when two calls disagree (one name, several groups)."""
        memo = self._membership
        key = (fn.key, group)
        if key not in memo:
            seen = {
                (n.members, n.member_stride)
                for n in iter_nodes(fn.body)
                if isinstance(n, Comm) and n.kind != "create" and n.group == group
            }
            only = seen.pop() if len(seen) == 1 else None
            memo[key] = only if only is not None and only != (None, None) else None
        return memo[key]

    # ------------------------------------------------------------- walking
    def walk(self, fn: Function) -> Iterator[tuple[Node, list[Cond], list[tuple[str, list[Node]]]]]:
        """Every node with its enclosing conditions and its continuation frames."""
        yield from self._walk(fn.body, [], [])

    def _walk(self, nodes, conds, cont, block=None):
        for i, n in enumerate(nodes):
            # `block`: what runs in sequence around `nodes` — a `try` body and its `finally`
            # (transformers' main_process_first: one barrier in each, under opposite tests)
            self.siblings[id(n)] = (nodes if block is None else block, i)
            here = [("seq", nodes[i + 1 :]), *cont]
            yield n, conds, here
            if isinstance(n, Branch):
                c = self.effective(n.cond)
                for arm in n.arms:
                    yield from self._walk(arm, [*conds, c], here)
            elif isinstance(n, Loop):
                inner = [*conds, self.effective(n.cond)] if n.cond is not None else conds
                yield from self._walk(n.body, inner, [("loop", n.body), *here])
            elif isinstance(n, Try):
                after = [("seq", n.orelse + n.final), *here]
                normal = n.body + n.orelse + n.final if n.final else None
                yield from self._walk(n.body, conds, after, normal)
                for h in n.handlers:
                    yield from self._walk(h, conds, [("seq", n.final), *here])
                yield from self._walk(n.orelse, conds, [("seq", n.final), *here], normal)
                yield from self._walk(n.final, conds, here, normal)

    def continuation(self, cont, kind: str, fn: Function) -> list[Tok]:
        out: list[Tok] = []
        for frame, nodes in cont:
            if frame == "loop":
                if kind == "continue":
                    break  # the next iteration goes on as on every other rank
                # `break` / `return` also skip the iterations the other ranks still run:
                # one more pass of the loop body stands for them
                out.extend(self.tokens(nodes, fn))
                if kind == "break":
                    break
                continue
            out.extend(self.tokens(nodes, fn))
        return out

    def all_functions(self) -> Iterator[Function]:
        """The functions the rules look for findings in: every one, but with project context
        (a pre-commit run) only those of the given files and of the callers a finding can be
        caused in; the other context files are summarised for callers, never reported."""
        only = self.options.get("evaluate_only")
        for f in self.files:
            if only is None or f.path in only:
                yield from f.functions.values()


def _mesh_dims(group: str) -> frozenset[str]:
    """The rank dimensions a group key spans: `mesh:dp+tp` (a DTensor sharded over both
    dimensions of a mesh) spans mesh:dp and mesh:tp; any other key, itself."""
    if group.startswith("mesh:") and "+" in group:
        return frozenset(f"mesh:{d}" for d in group[5:].split("+"))
    return frozenset({group})


def _has_module_param(toks) -> bool:
    return any(t.module_param is not None or any(map(_has_module_param, t.kids)) for t in toks)


def _param_of_slot(fn: Function, slot: str) -> str | None:
    """The parameter a call's argument `slot` ("#k" or a keyword) binds."""
    if not slot.startswith("#"):
        return slot if slot in fn.params else None
    params = list(fn.params)
    offset = 1 if params and params[0] in ("self", "cls") else 0
    k = int(slot[1:]) + offset
    return params[k] if k < len(params) else None


def _slot_of_param(fn: Function, name: str) -> str | None:
    params = list(fn.params)
    offset = 1 if params and params[0] in ("self", "cls") else 0
    if name not in params or params.index(name) < offset:
        return None
    return f"#{params.index(name) - offset}"


def root_of(c: Comm) -> str | None:
    """A collective's root as `src=0` / `src=tp_leader + 1`: the literal value when known, the
    rank itself resolved where a literal rank test leaves one rank, else the text (the same
    text names the same value on every rank of a group); None when it cannot be told."""
    r = c.root
    if r is None:
        return None
    if r.literal is not None:
        return f"{r.param}={r.literal}"
    if r.exact:
        if c.rank_set is not None and len(c.rank_set) == 1 and not r.group_param:
            return f"{r.param}={next(iter(c.rank_set))}"
        return None
    return f"{r.param}={r.text}"


def leaves(toks) -> Iterator[Tok]:
    """The real calls of a token sequence, in order (inside branches and loops too)."""
    for t in toks:
        if t.kids:
            for arm in t.kids:
                yield from leaves(arm)
        else:
            yield t


def same_on_members(
    cond: Cond, members: frozenset[int] | None, stride: tuple[int, int | None] | None
) -> bool:
    """Whether a rank condition has one value on every member of a group: every member takes
    the same arm, so the group's calls cannot diverge between its members. `true_ranks` and
    `false_ranks` may over-approximate (`rank == 0 and x`), so only disjointness is used."""
    if cond.data:
        return False

    def disjoint(ranks: frozenset[int]) -> bool:
        if members is not None:
            return not (members & ranks)
        if stride is not None and stride[1] is not None:
            return all(r % stride[0] != stride[1] for r in ranks)
        return False

    if cond.true_ranks is not None and disjoint(cond.true_ranks):
        return True
    if cond.false_ranks is not None and disjoint(cond.false_ranks):
        return True
    if cond.mod_test is not None:
        k, a, _holds = cond.mod_test
        if members is not None:
            return len({m % k == a for m in members}) <= 1
        if stride is not None and stride[0] % k == 0:
            return True  # members share one residue mod stride[0], hence one mod k
    return False


def cond_related(fn: Function, cond: Cond) -> tuple[str, Pos, str]:
    why = cond.origin or "its value can differ between ranks"
    if cond.decorator:
        msg = why
    elif cond.data and not cond.dims:
        msg = f"this condition depends on data: {why}"
    else:
        msg = f"this condition depends on the rank: {why}"
    return (fn.path, cond.pos, msg)


def arm_label(branch: Branch, k: int) -> str:
    if branch.kind in ("if", "ternary", "exhaustion", "oom"):
        return f"`{branch.cond.text}` is {'true' if k == 0 else 'false'}"
    return f"case {k + 1} of `match {branch.cond.text}` applies"


def first_difference(arms: list[list[Tok]]) -> tuple[int, int, Tok, Tok | None]:
    """(index, arm, token, other arm's token at that index) of the first difference."""
    n = max(len(a) for a in arms)
    for i in range(n):
        at = [a[i] if i < len(a) else None for a in arms]
        keys = {t.key() if t else None for t in at}
        if len(keys) > 1:
            k = next(j for j, t in enumerate(at) if t is not None)
            other = next((t for j, t in enumerate(at) if j != k and t is not None), None)
            if other is not None and other.key() == at[k].key():
                other = next((t for t in at if t is not None and t.key() != at[k].key()), None)
            return i, k, at[k], other
    raise ValueError("arms do not differ")


def leaf_tok(t: Tok) -> Tok:
    """The first real call inside an alt/loop token."""
    while t.kids:
        t = next(x for arm in t.kids for x in arm)
    return t


def _raises(n: Node) -> bool:
    return isinstance(n, Exit) and n.kind == "raise"
