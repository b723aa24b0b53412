"""The data table of API facts (`api_table.yaml`), merged with the user's `[tool.commlint]`."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

TABLE_PATH = Path(__file__).with_name("api_table.yaml")

ArgSpec = tuple[int | None, str | None]


def _arg(spec: Any) -> ArgSpec | None:
    """`[pos, kw]`, `pos` or `"kw"` -> (pos, kw)."""
    if spec is None:
        return None
    if isinstance(spec, bool):
        raise ValueError(f"bad argument spec {spec!r}")
    if isinstance(spec, int):
        return (spec, None)
    if isinstance(spec, str):
        return (None, spec)
    if isinstance(spec, list | tuple) and len(spec) == 2:
        pos, kw = spec
        return (None if pos in (None, "null") else int(pos), kw or None)
    raise ValueError(f"bad argument spec {spec!r}: expected [position, keyword]")


@dataclass(frozen=True)
class CallFact:
    """What one API call does to communication."""

    name: str
    kind: str  # collective | send | recv | batch | create
    op: str
    group: ArgSpec | None = None
    root: ArgSpec | None = None
    group_root: ArgSpec | None = None
    async_: ArgSpec | None = None
    handle: bool = False
    functional: bool = False
    when_kw: str | None = None
    # the group a call finds by itself, not WORLD (`clip_grad_norm_`: the parameters' mesh)
    implicit_group: str | None = None
    ranks: ArgSpec | None = None
    local_sync: ArgSpec | None = None
    outputs: tuple[int, ...] = ()

    @classmethod
    def from_data(cls, name: str, d: dict[str, Any], default_kind: str = "collective") -> CallFact:
        return cls(
            name=name,
            kind=d.get("kind", default_kind),
            op=str(d.get("op", name.rsplit(".", 1)[-1])),
            group=_arg(d.get("group")),
            root=_arg(d.get("root")),
            group_root=_arg(d.get("group_root")),
            async_=_arg(d.get("async")),
            handle=bool(d.get("handle", False)),
            functional=bool(d.get("functional", False)),
            when_kw=d.get("when_kw"),
            implicit_group=d.get("implicit_group"),
            ranks=_arg(d.get("ranks")),
            local_sync=_arg(d.get("local_sync")),
            outputs=tuple(d.get("outputs", ())),
        )


@dataclass
class ApiTable:
    aliases: dict[str, str]
    calls: dict[str, CallFact]
    methods: dict[str, dict[str, CallFact]]
    receivers: dict[str, str]  # receiver last name / dotted text -> type
    constructors: dict[str, str]
    module_bases: dict[str, str]
    wrappers: dict[str, dict[str, Any]]
    group_getters: dict[str, dict[str, Any]]
    rank_sources: dict[str, dict[str, Any]]
    rank_helpers: frozenset[str]
    rank_attributes: frozenset[str]
    rank_env: frozenset[str]
    rank_zero_decorators: frozenset[str]
    data_sources: frozenset[str]
    data_methods: frozenset[str]
    random_tensors: frozenset[str]
    tensor_functions: frozenset[str]
    thread_spawners: frozenset[str]
    executor_methods: frozenset[str]
    exit_calls: frozenset[str]
    prefilter: re.Pattern[str]
    loop_signals: tuple = ()  # rows: hooks that stop a framework's loop (`loop_signals.py`)
    agreeing_calls: frozenset[str] = frozenset()  # calls whose result every rank shares
    # receiver type -> its no-sync context: {method, model (argument), quiets (methods)}
    no_sync_contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    _match_cache: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)

    def canonical(self, qname: str) -> str:
        for prefix in sorted(self.aliases, key=len, reverse=True):
            if qname == prefix or qname.startswith(prefix + "."):
                return self.aliases[prefix] + qname[len(prefix) :]
        return qname

    def _lookup(self, section: str, qname: str) -> Any:
        key = (section, qname)
        if key in self._match_cache:
            return self._match_cache[key]
        table: dict[str, Any] = getattr(self, section)
        name = self.canonical(qname)
        found = table.get(name)
        if found is None:
            parts = name.split(".")
            for k in range(1, len(parts)):
                found = table.get(".".join(parts[k:]))
                if found is not None:
                    break
        self._match_cache[key] = found
        return found

    def call(self, qname: str) -> CallFact | None:
        return self._lookup("calls", qname)

    def group_getter(self, qname: str) -> dict[str, Any] | None:
        return self._lookup("group_getters", qname)

    def rank_source(self, qname: str) -> dict[str, Any] | None:
        return self._lookup("rank_sources", qname)

    def wrapper(self, qname: str) -> dict[str, Any] | None:
        return self._lookup("wrappers", qname)

    def constructor(self, qname: str) -> str | None:
        return self._lookup("constructors", qname)

    def module_base(self, qname: str) -> str | None:
        return self._lookup("module_bases", qname)

    def in_set(self, names: frozenset[str], qname: str) -> bool:
        name = self.canonical(qname)
        if name in names:
            return True
        parts = name.split(".")
        return any(".".join(parts[k:]) in names for k in range(1, len(parts)))


def _load_raw() -> dict[str, Any]:
    return yaml.safe_load(TABLE_PATH.read_text(encoding="utf-8"))


@cache
def _raw_text() -> str:
    return TABLE_PATH.read_text(encoding="utf-8")


def build_table(extra: dict[str, Any] | None = None) -> ApiTable:
    """The table, extended by the user's `[tool.commlint]` settings (see `config.py`)."""
    raw = _load_raw()
    extra = extra or {}
    calls = {n: CallFact.from_data(n, d) for n, d in raw["calls"].items()}
    for n, d in (extra.get("calls") or {}).items():
        calls[n] = CallFact.from_data(n, d)
    methods: dict[str, dict[str, CallFact]] = {}
    receivers: dict[str, str] = {}
    for typ, d in raw["methods"].items():
        methods[typ] = {m: CallFact.from_data(m, f) for m, f in d["calls"].items()}
        for r in d.get("receivers", []):
            receivers[r] = typ
    group_getters = dict(raw["group_getters"])
    for n, g in (extra.get("group_getters") or {}).items():
        group_getters[n] = g if isinstance(g, dict) else {"group": str(g), "dims": [str(g)]}
    rank_sources = dict(raw["rank_sources"])
    for n, d in (extra.get("rank_sources") or {}).items():
        rank_sources[n] = d if isinstance(d, dict) else {"dims": [str(d)]}
    prefilter = raw["prefilter"]
    words = [*extra.get("rank_helpers", []), *(extra.get("calls") or {})]
    words += [w.rsplit(".", 1)[-1] for w in words]
    if words:
        prefilter += "|" + "|".join(re.escape(w) for w in words)
    return ApiTable(
        aliases=dict(raw["aliases"]),
        calls=calls,
        methods=methods,
        receivers=receivers,
        constructors=dict(raw["constructors"]),
        module_bases=dict(raw["module_bases"]),
        wrappers=dict(raw["wrappers"]),
        group_getters=group_getters,
        rank_sources=rank_sources,
        rank_helpers=frozenset(raw["rank_helpers"]) | frozenset(extra.get("rank_helpers", [])),
        rank_attributes=frozenset(raw["rank_attributes"])
        | frozenset(extra.get("rank_attributes", [])),
        rank_env=frozenset(raw["rank_env"]) | frozenset(extra.get("rank_env", [])),
        rank_zero_decorators=frozenset(raw["rank_zero_decorators"])
        | frozenset(extra.get("rank_zero_decorators", [])),
        data_sources=frozenset(raw["data_sources"]),
        data_methods=frozenset(raw["data_methods"]),
        random_tensors=frozenset(raw.get("random_tensors", [])),
        tensor_functions=frozenset(raw.get("tensor_functions", [])),
        thread_spawners=frozenset(raw["thread_spawners"]),
        executor_methods=frozenset(raw["executor_methods"]),
        exit_calls=frozenset(raw["exit_calls"]),
        prefilter=re.compile(prefilter),
        loop_signals=tuple(raw.get("loop_signals", [])),
        agreeing_calls=frozenset(raw.get("agreeing_calls", [])),
        no_sync_contexts=dict(raw.get("no_sync_contexts") or {}),
    )


def table_fingerprint(extra: dict[str, Any] | None) -> str:
    """Part of the cache key: the table text and the user's extensions."""
    h = hashlib.sha256(_raw_text().encode())
    h.update(json.dumps(extra or {}, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]
