"""What the linter keeps of a file: per function, a tree of the communication it performs.

The extractor (`extract.py`) turns CPython's `ast` trees into these plain, picklable objects
(which the cache stores); the analysis (`analyze.py`) and the rules only ever see these.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pos:
    line: int
    col: int  # 1-based
    end_line: int
    end_col: int
    stmt_line: int  # first line of the enclosing statement (suppression comments)


@dataclass(frozen=True)
class Cond:
    """The condition of a branch or loop, and why its value can differ between ranks."""

    text: str
    pos: Pos
    dims: frozenset[str] = frozenset()  # "global", or group keys / mesh dims it depends on
    data: bool = False  # depends on data, time or iterator exhaustion
    origin: str = ""  # "`rank` = dist.get_rank() (line 4)"
    guard: str | None = None  # membership test: the group key, or "*" for `rank in ranks`
    true_ranks: frozenset[int] | None = None  # global ranks for which it holds, if finite
    false_ranks: frozenset[int] | None = None  # global ranks for which it fails, if finite
    mod_test: tuple[int, int, bool] | None = None  # true iff (rank % k == a) == holds
    approx: bool = False  # and/or: true_ranks/false_ranks may hold more ranks than the truth
    deps: tuple[str, ...] = ()  # project calls whose return value may carry rank taint
    decorator: bool = False  # a rank-zero-only decorator
    # `rank != self.NAME` with NAME a class attribute this file does not give: (op, NAME,
    # the method's class key), resolved through the project's classes
    vs_attr: tuple[str, str, str] | None = None
    # `data` of values a collective may have made the same on every rank: (sources, calls
    # gone through) of `extract_agreement.Agreement`, answered by `Program.agreed`
    agreed_if: tuple[tuple, tuple[tuple[str, ...], ...]] | None = None

    @property
    def divergent(self) -> bool:
        return bool(self.dims) or self.data


@dataclass(frozen=True)
class RootFact:
    param: str  # src / dst / group_src / group_dst
    group_param: bool  # True: a rank within the group
    text: str
    literal: int | None
    dims: frozenset[str]
    exact: bool  # exactly this rank's own rank
    group_rank_of: str | None  # a rank within this group key
    pos: Pos


@dataclass
class Comm:
    """One call that communicates (or creates a group, which is a collective too)."""

    kind: str  # collective | send | recv | batch | create
    op: str
    group: str  # group key: WORLD, megatron.tp, mesh:tp, param:NAME, or the expression text
    text: str  # how the user wrote the callee, e.g. `dist.all_reduce`
    pos: Pos
    blocking: bool = True
    default_group: bool = False  # no group argument given
    torch_api: bool = False  # a torch.distributed function (has a group argument)
    root: RootFact | None = None
    peer_dims: frozenset[str] = frozenset()
    members: frozenset[int] | None = None  # literal members of the group, if known
    # members all ≡ a (mod k) (`new_group(range(a, world_size, k))`); a None: the same unknown a
    member_stride: tuple[int, int | None] | None = None
    # per positional buffer argument: (the variable it was made from, "" / "dtype X" / "size")
    payload: tuple[tuple[str, str], ...] = ()
    group_size: int | None = None
    rank_set: frozenset[int] | None = None  # global ranks that can reach this call, if finite
    rank_excluded: frozenset[int] | None = None
    rank_cond: Cond | None = None  # the condition that restricts rank_set
    under_divergent: bool = False  # inside a rank/data-dependent branch of its function
    in_branch: bool = False  # inside any branch or loop condition of its function
    via: str | None = None  # the wrapper that hides this communication


@dataclass
class CallSite:
    """A call of a function that may be defined in the project."""

    names: tuple[str, ...]  # candidate qualified names, best first
    text: str
    pos: Pos
    group_args: dict[str, str] = field(default_factory=dict)  # param name or "#k" -> group key
    # param name or "#k" -> where the module handed over came from (`ModuleCall.refs`)
    module_args: dict[str, tuple[tuple, ...]] = field(default_factory=dict)
    # `torch.scatter(...)`, `np.mean(...)`: called on an imported module, never an object
    on_module: bool = False


@dataclass
class Branch:
    cond: Cond
    arms: list[list[Node]]
    pos: Pos
    kind: str = "if"  # if | match | ternary | exhaustion | oom


@dataclass
class Loop:
    cond: Cond | None  # rank/data dependence of the bound, else None
    body: list[Node]
    pos: Pos
    kind: str = "for"
    unordered: str | None = None  # `for x in set(...)`: the set's text (its order is per process)


@dataclass
class Exit:
    kind: str  # return | break | continue | raise | exit
    pos: Pos
    text: str


@dataclass
class Try:
    body: list[Node]
    handlers: list[list[Node]]
    orelse: list[Node]
    final: list[Node]
    pos: Pos
    # the body is one statement whose only work is one call (`try: dist.barrier()`)
    lone_call: bool = False
    # calls in the body that may raise on some ranks only, because an argument depends on
    # the rank or on this rank's data (`load_shard(rank)`): (call text, position, why)
    rank_raises: tuple[tuple[str, Pos, str], ...] = ()
    handler_types: tuple[str, ...] = ()  # per handler, its exception type as written ("": bare)


@dataclass
class Spawn:
    """Work handed to a thread or executor."""

    target: Node  # a Comm (the target is an API) or a CallSite
    how: str
    pos: Pos


@dataclass
class ModuleCall:
    """A call of a module the function did not wrap itself (`model(x)` with `model` a
    parameter, a helper's result, or handed to a helper that may wrap it in place): it
    communicates when the analysis finds the module wrapped (FSDP, DDP) where it came from.

    A ref is ("typ", "wrapped:<op>:<group>"), ("returns", names of the project call it came
    from), ("inplace", names of a project call it was handed to, "#k" or the keyword), or
    ("param", key of the function, parameter name)."""

    refs: tuple[tuple, ...]
    text: str
    pos: Pos
    backward: bool = False  # `loss.backward()` after the module's forward: its gradients


Node = Comm | CallSite | Branch | Loop | Exit | Try | Spawn | ModuleCall


@dataclass
class AsyncFact:
    """An async communication handle and what became of it."""

    op: str
    text: str
    pos: Pos
    status: str  # discarded | unused


@dataclass
class Function:
    key: str  # module.qualname
    name: str
    qualname: str
    path: str
    pos: Pos
    params: tuple[str, ...]
    param_defaults: dict[str, str]
    body: list[Node]
    rank_guard: Cond | None = None  # a rank-zero-only decorator
    returns_rank: frozenset[str] = frozenset()  # rank dims of the returned value
    # for `Program.agreed` (extract_agreement.returned): nothing of the rank's own is returned
    # but what the calls in `returns_through` return; per returned value, the calls whose
    # collective result it may be (None: some returned value is not)
    returns_clean: bool = True
    returns_through: tuple[tuple[str, ...], ...] = ()
    returns_sources: tuple[tuple, ...] | None = None  # per value: its Agreement.sources
    # where the returned modules came from, and the parameters whose module the function may
    # wrap in place (`fully_shard(model)`): refs as in `ModuleCall`
    returns_module: tuple[tuple, ...] = ()
    wraps_params: tuple[tuple[str, tuple[tuple, ...]], ...] = ()


@dataclass
class FileFacts:
    path: str
    module: str
    functions: dict[str, Function]
    creates_subgroups: bool = False
    async_facts: list[AsyncFact] = field(default_factory=list)
    noqa: dict[int, frozenset[str] | None] = field(default_factory=dict)  # line -> codes; None=all
    syntax_error: tuple[int, int, str] | None = None
    skipped: bool = False  # never mentions distributed code
    internal_error: str | None = None  # the extractor failed on this file (a bug of ours)
    not_analysed: tuple[int, int, str] | None = None  # valid Python left unanalysed (CL114)
    # class key -> (qualified names of its bases, its integer class attributes)
    classes: dict[str, tuple[tuple[str, ...], dict[str, int]]] = field(default_factory=dict)


def iter_nodes(nodes: list[Node]):
    """Every node in a tree, depth first, in source order."""
    for n in nodes:
        yield n
        if isinstance(n, Branch):
            for arm in n.arms:
                yield from iter_nodes(arm)
        elif isinstance(n, Loop):
            yield from iter_nodes(n.body)
        elif isinstance(n, Try):
            yield from iter_nodes(n.body)
            for h in n.handlers:
                yield from iter_nodes(h)
            yield from iter_nodes(n.orelse)
            yield from iter_nodes(n.final)
        elif isinstance(n, Spawn):
            yield n.target


def communicates(facts: FileFacts) -> bool:
    """Whether a function of the file makes a communicating call of its own."""
    return any(isinstance(n, Comm) for fn in facts.functions.values() for n in iter_nodes(fn.body))
