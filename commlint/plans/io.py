"""Reading and writing trace / plan files (YAML or JSON), with located errors.

Every problem with the input becomes a `CommlintInputError` whose one-line message names the
file, the line when known, and the rank and action index — never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from commlint.findings import CommlintInputError
from commlint.plans.gate import read_text
from commlint.trace import (
    ASYNC_P2P_OPS,
    COLLECTIVE_OPS,
    P2P_OPS,
    ROOTED_OPS,
    WORLD,
    Action,
    SharedAction,
    Trace,
)
from commlint.trace_io import dump_trace as dump_trace  # its home is beside the Trace

PLAN_SUFFIXES = (".yaml", ".yml", ".json")

# Nesting levels a plan file may use (a plan needs 6: ranks, rank, list, action, shape; meta
# a few more). Checked before parsing: PyYAML's C parser recurses natively and crashes the
# process around 10,000 levels; the JSON decoder raises RecursionError near 1,000.
MAX_DEPTH = 100
# Anchors and aliases may repeat parts of a file; expanded, a YAML file may hold this many
# values more than it has bytes. Past that it is refused, not expanded ("billion laughs").
MAX_ALIAS_EXPANSION = 1 << 20


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader, refusing duplicate keys and locating integers too long to convert."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                # compared as written (tag and text): constructing every key twice cost a
                # third of the load; `1` and `0x1` are not caught, `a` twice is
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, f"integer with {len(node.value)} digits is too long", node.start_mark
            ) from None


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)


@dataclass
class LineMap:
    """Line numbers of a plan file's parts, for locating errors and findings."""

    actions: dict[tuple[int, int], int] = field(default_factory=dict)
    ranks: dict[int, int] = field(default_factory=dict)
    keys: dict[str, int] = field(default_factory=dict)

    def action_line(self, rank: int, index: int) -> int | None:
        return self.actions.get((rank, index), self.ranks.get(rank))

    def rank_line(self, rank: int) -> int | None:
        return self.ranks.get(rank)

    def key_line(self, key: str) -> int | None:
        return self.keys.get(key)


class JsonLineMap(LineMap):
    """The line map of a JSON plan, found only when an error or a finding first asks for a
    line: a plan that checks clean never pays for it (a second parse cost more than the
    first, and the position map took more memory than the trace)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self._text: str | None = text

    def _scan(self) -> None:
        if self._text is not None:
            text, self._text = self._text, None
            # lines are a courtesy: a part that cannot be placed has none
            with contextlib.suppress(ValueError, IndexError, RecursionError):
                _scan_json_lines(text, self)

    def action_line(self, rank: int, index: int) -> int | None:
        self._scan()
        return super().action_line(rank, index)

    def rank_line(self, rank: int) -> int | None:
        self._scan()
        return super().rank_line(rank)

    def key_line(self, key: str) -> int | None:
        self._scan()
        return super().key_line(key)


_WS = re.compile(r"[ \t\n\r]*")


def _scan_json_lines(text: str, lines: LineMap) -> None:
    """Lines of the top-level keys, the ranks and each action of a JSON plan (text known to
    parse). Values are skipped with the C decoder, so the cost is one pass at C speed plus
    one Python step per action."""
    decode = json.JSONDecoder().raw_decode
    scanstring = json.decoder.scanstring  # type: ignore[attr-defined]
    ws = _WS.match
    pos_line = [0, 1]  # newlines counted up to a position, incrementally

    def line_at(pos: int) -> int:
        pos_line[1] += text.count("\n", pos_line[0], pos)
        pos_line[0] = pos
        return pos_line[1]

    i = ws(text, 0).end()
    if text[i] != "{":
        return
    i = ws(text, i + 1).end()
    while text[i] == '"':
        key_at = i
        key, i = scanstring(text, i + 1)
        lines.keys[key] = line_at(key_at)
        i = ws(text, ws(text, i).end() + 1).end()  # past ':'
        if key == "ranks" and text[i] == "{":
            i = ws(text, i + 1).end()
            while text[i] == '"':
                rank_at = i
                rank_key, i = scanstring(text, i + 1)
                i = ws(text, ws(text, i).end() + 1).end()
                rank = int(rank_key) if rank_key.isdigit() else None
                if rank is not None:
                    lines.ranks[rank] = line_at(rank_at)
                if rank is None or text[i] != "[":
                    _, i = decode(text, i)
                else:
                    i = ws(text, i + 1).end()
                    index = 0
                    while text[i] != "]":
                        lines.actions[(rank, index)] = line_at(i)
                        _, i = decode(text, i)
                        i = ws(text, i).end()
                        if text[i] == ",":
                            i = ws(text, i + 1).end()
                        index += 1
                    i += 1
                i = ws(text, i).end()
                if text[i] == ",":
                    i = ws(text, i + 1).end()
            i += 1
        else:
            _, i = decode(text, i)
        i = ws(text, i).end()
        if text[i] == ",":
            i = ws(text, i + 1).end()


@dataclass
class LoadedTrace:
    """A validated trace and where it came from."""

    trace: Trace
    path: str | None = None
    lines: LineMap = field(default_factory=LineMap)


def _scalar_key(node: yaml.Node) -> Any:
    try:
        return int(node.value)
    except (TypeError, ValueError):
        return node.value


def _line_map(root: yaml.Node | None) -> LineMap:
    lines = LineMap()
    if not isinstance(root, yaml.MappingNode):
        return lines
    for key, value in root.value:
        lines.keys[str(key.value)] = key.start_mark.line + 1
        if key.value == "ranks" and isinstance(value, yaml.MappingNode):
            for rank_key, seq in value.value:
                rank = _scalar_key(rank_key)
                if not isinstance(rank, int):
                    continue
                lines.ranks[rank] = rank_key.start_mark.line + 1
                if isinstance(seq, yaml.SequenceNode):
                    for i, item in enumerate(seq.value):
                        lines.actions[(rank, i)] = item.start_mark.line + 1
    return lines


_QUOTED = re.compile(r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\n]|'')*'""")
_FLOW = re.compile(r"[\[\]{}]")
_DASHES = re.compile(r"(?:-[ \t]+)+")
_COMMENT = re.compile(r"(?:^|[ \t])#")
_LONG_INT = re.compile(r"\d{4000,}")


def yaml_depth_error(text: str, limit: int = MAX_DEPTH) -> int | None:
    """The 1-based line where a YAML text first nests deeper than `limit`, else None.

    A linear scan, no parsing: block levels from the indentation stack (plus `- - -` on one
    line), flow levels from brackets outside quotes and comments. It may count a level or two
    too many for odd layouts, never thousands; the limit is far above what a plan needs."""
    flow = 0
    block = 0
    indents = [-1]
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" \t")
        if not stripped or (stripped[0] == "#" and not flow):
            continue
        if not flow:
            col = len(line) - len(stripped)
            while indents[-1] >= col:
                indents.pop()
            indents.append(col)
            dashes = _DASHES.match(stripped)
            block = len(indents) - 1 + (dashes.group(0).count("-") if dashes else 0)
            if block > limit:
                return lineno
        if not flow and "[" not in line and "{" not in line:
            continue
        body = _QUOTED.sub("", line)
        cut = _COMMENT.search(body)
        if cut:
            body = body[: cut.start()]
        for m in _FLOW.finditer(body):
            if m.group() in "[{":
                before = body[: m.start()].rstrip()
                if not flow and before and before[-1] not in ":-?,":
                    continue  # a bracket inside a plain scalar: `label: F[3`
                flow += 1
                if block + flow > limit:
                    return lineno
            elif flow:
                flow -= 1
    return None


def _json_depth_line(text: str, limit: int = MAX_DEPTH) -> int | None:
    """The line where JSON text first nests deeper than `limit` (only asked after the decoder
    gave up, so the scan's cost does not matter)."""
    depth = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[{]|[\]}]', text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                return text.count("\n", 0, m.start()) + 1
        elif c in "]}":
            depth -= 1
    return None


# The YAML composer that locates a duplicate JSON key costs about 100 bytes of memory and
# 10 µs per byte of text: past this size the error names the key without its line.
_LOCATE_DUPLICATES_UP_TO = 1 << 20


class _DuplicateKey(ValueError):
    pass


def _object_hook() -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A JSON object hook that refuses duplicate keys and returns one dict for equal actions:
    the million actions of a plan are mostly a few hundred distinct ones, so the parsed file
    takes a pointer per action (140 MB instead of 570 MB for 1,048,576 actions), and each
    distinct action is validated once."""
    seen: dict[str, dict[str, Any]] = {}

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # an action: at most the fields an action has, one of them `op` (usually the first)
        small = (
            len(pairs) <= 24
            and bool(pairs)
            and (pairs[0][0] == "op" or any(name == "op" for name, _ in pairs))
        )
        if small:
            key = repr(pairs)  # C speed, and it tells 1, 1.0 and true apart
            hit = seen.get(key)
            if hit is not None:
                return hit
        out = dict(pairs)
        if len(out) != len(pairs):
            keys: set[str] = set()
            for name, _ in pairs:
                if name in keys:
                    raise _DuplicateKey(name)
                keys.add(name)
        if small:
            seen[key] = out
        return out

    return hook


def _duplicate_line(text: str, key: str) -> int | None:
    """The line of the first repeated `key` within one JSON object (found with the YAML
    composer, which keeps positions; only on this error path, and only for texts it can
    afford)."""
    if len(text) > _LOCATE_DUPLICATES_UP_TO or _json_depth_line(text) is not None:
        return None
    try:
        _Loader(text).get_single_data()
    except yaml.MarkedYAMLError as exc:
        if exc.problem_mark is not None and f"duplicate key {key!r}" in str(exc.problem):
            return exc.problem_mark.line + 1
    except (yaml.YAMLError, RecursionError):
        return None
    return None


_ALIAS = re.compile(r"(?:^|[\s\[{,:?-])\*[^\s,\[\]{}]")


def _expands_too_far(data: Any, budget: int) -> bool:
    """True when the data, with every alias expanded, has more than `budget` values (a walk
    that stops at the budget: its cost is bounded by the input)."""
    stack = [data]
    seen = 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > budget:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
            seen += len(item)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _json_split(text: str) -> Any:
    """The parse of a JSON plan in C-speed passes, or None when the text is not one this
    path can prove it reads exactly as `json.loads` would (the caller then parses it whole).

    The text is split at each `{`. A piece holding a `}` starts with an innermost object
    (`{...}` with no brace inside: each action, and the `groups` mapping); the other pieces
    open outer objects. Each *distinct* piece is looked at once: its object is parsed
    (duplicate keys refused) and it becomes `NaN` plus what follows the object. The skeleton
    so built — 4 MB for a 52 MB plan of a million actions — is parsed with `parse_constant`
    handing back the cut objects in order. That is the same parse as the whole text's when
    every placeholder is read as a value, none inside a string: the text holds no
    `NaN`/`Infinity` of its own, so the skeleton asks for exactly as many constants as objects
    were cut only if each cut began outside a string, and each cut, being a whole JSON object,
    also ends outside one. A brace inside a string breaks that count (or the cut's own parse),
    and the text is then parsed whole. Parsing every action from its characters was two
    thirds of loading a million-action plan."""
    if "NaN" in text or "Infinity" in text:
        return None
    pieces = text.split("{")
    rest = pieces[1:]
    del pieces[1:]
    if not rest:
        return None
    hook = _object_hook()
    skeleton_of: dict[str, str] = dict.fromkeys(rest)  # type: ignore[arg-type]
    object_of: dict[str, Any] = {}
    fresh: list[str] = []  # objects the hook does not share (not actions): one each
    for piece in skeleton_of:
        end = piece.find("}") + 1
        if not end:
            skeleton_of[piece] = "{" + piece  # opens an outer object
            continue
        obj = json.loads("{" + piece[:end], object_pairs_hook=hook)
        object_of[piece] = obj
        skeleton_of[piece] = "NaN" + piece[end:]
        if "op" not in obj or len(obj) > 24:
            fresh.append(piece)
    if len(object_of) == len(skeleton_of):
        objects = list(map(object_of.__getitem__, rest))
    else:
        objects = list(map(object_of.__getitem__, filter(object_of.__contains__, rest)))
    if fresh and (len(fresh) > 16 or any(rest.count(piece) > 1 for piece in fresh)):
        again = set(fresh)
        objects = [
            json.loads("{" + p[: p.find("}") + 1], object_pairs_hook=hook)
            if p in again
            else object_of[p]
            for p in rest
            if p in object_of
        ]
    skeleton = pieces[0] + "".join(map(skeleton_of.__getitem__, rest))
    del rest, skeleton_of, object_of
    given = iter(objects)
    data = json.loads(
        skeleton, object_pairs_hook=hook, parse_constant=functools.partial(next, given)
    )
    if next(given, given) is not given:  # a placeholder was read inside a string
        return None
    return data


def _parse_json(text: str, path: str | None) -> Any:
    with contextlib.suppress(ValueError, RecursionError):
        data = _json_split(text)
        if data is not None:
            return data
    try:
        return json.loads(text, object_pairs_hook=_object_hook())
    except json.JSONDecodeError as exc:
        raise CommlintInputError(f"invalid JSON: {exc.msg}", path, exc.lineno) from None
    except RecursionError:
        line = _json_depth_line(text)
        raise CommlintInputError(f"too deeply nested (depth > {MAX_DEPTH})", path, line) from None
    except _DuplicateKey as exc:
        key = str(exc)
        shown = repr(key) if len(key) <= 80 else repr(key[:80]) + "…"
        raise CommlintInputError(
            f"duplicate key {shown}", path, _duplicate_line(text, key)
        ) from None
    except ValueError as exc:  # an integer longer than Python converts (sys.int_info)
        m = _LONG_INT.search(text)
        line = text.count("\n", 0, m.start()) + 1 if m else None
        digits = len(m.group()) if m else "too many"
        raise CommlintInputError(
            f"integer with {digits} digits is too long ({exc})", path, line
        ) from None


def _parse(text: str, path: str | None, is_json: bool) -> tuple[Any, LineMap]:
    if is_json:
        return _parse_json(text, path), JsonLineMap(text)
    deep = yaml_depth_error(text)
    if deep is not None:
        raise CommlintInputError(f"too deeply nested (depth > {MAX_DEPTH})", path, deep)
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except RecursionError:
        raise CommlintInputError(f"too deeply nested (depth > {MAX_DEPTH})", path) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise CommlintInputError(f"invalid YAML: {exc.problem or exc}", path, line) from None
    except yaml.YAMLError as exc:
        raise CommlintInputError(f"invalid YAML: {exc}", path) from None
    if _ALIAS.search(text) and _expands_too_far(data, len(text) + MAX_ALIAS_EXPANSION):
        raise CommlintInputError(
            f"anchors and aliases expand this {len(text)}-byte file beyond "
            f"{len(text) + MAX_ALIAS_EXPANSION} values; write the repeated parts out or use a "
            "generate: block",
            path,
        )
    return data, _line_map(node)


def _where(loc: tuple[Any, ...]) -> tuple[str, int | None, int | None]:
    """Turn a pydantic error location into 'rank R, action I, field F'."""
    parts: list[str] = []
    rank = index = None
    rest = list(loc)
    if rest[:1] == ["ranks"] and len(rest) >= 2:
        rank = rest[1] if isinstance(rest[1], int) else None
        parts.append(f"rank {rest[1]}")
        rest = rest[2:]
        if rest and isinstance(rest[0], int):
            index = rest[0]
            parts.append(f"action {index}")
            rest = rest[1:]
        rest = [r for r in rest if r not in ("[key]",)]
    if rest:
        parts.append("field " + ".".join(str(r) for r in rest))
    return ", ".join(parts), rank, index


def _validation_errors(exc: ValidationError, path: str | None, lines: LineMap) -> list:
    out = []
    for err in exc.errors():
        where, rank, index = _where(tuple(err["loc"]))
        kind = err["type"]
        field_name = err["loc"][-1] if err["loc"] else ""
        if kind == "extra_forbidden":
            msg = f"unknown field '{field_name}'"
            where = where.rsplit(", field", 1)[0]
        elif kind == "literal_error" and field_name == "op":
            msg = f"unknown op {err['input']!r} (expected {err['ctx']['expected']})"
            where = where.rsplit(", field", 1)[0]
        else:
            msg = err["msg"].lower()
        line = None
        if rank is not None:
            line = lines.action_line(rank, index) if index is not None else lines.rank_line(rank)
        elif err["loc"]:
            line = lines.key_line(str(err["loc"][0]))
        text = f"{where}: {msg}" if where else msg
        out.append(CommlintInputError(text, path, line))
    return out


def action_ref(trace: Trace, rank: int | None, index: int | None, site: bool = False) -> str:
    """`rank 1, action 3` (with ` (train.py:41)` when `site` and the action has one)."""
    parts = []
    if rank is not None:
        parts.append(f"rank {rank}")
    if index is not None:
        parts.append(f"action {index}")
        where = trace.ranks[rank][index].site if site else None
        if where:
            parts[-1] += f" ({where})"
    return ", ".join(parts)


def semantic_errors(trace: Trace) -> Iterable[tuple[int | None, int | None, str]]:
    """Structural problems the schema cannot express: (rank, action index, message)."""
    w = trace.world_size
    for name, members in trace.groups.items():
        if name == WORLD and sorted(members) != list(range(w)):
            yield None, None, f"group WORLD is reserved for all {w} ranks"
        if not members:
            yield None, None, f"group '{name}' has no ranks"
        bad = [m for m in members if not 0 <= m < w]
        if bad:
            yield None, None, f"group '{name}' has ranks {bad} outside 0..{w - 1}"
        if len(set(members)) != len(members):
            yield None, None, f"group '{name}' lists a rank twice"
    for rank in list(trace.ranks) + list(trace.ends):
        if not 0 <= rank < w:
            yield rank, None, f"rank {rank} is outside 0..{w - 1} (world_size {w})"
    # an action that names no peer and no handle is valid or not whatever rank issues it:
    # decided once per distinct object (plans share them), not once per occurrence
    context_free: dict[int, bool] = {}
    for rank, actions in trace.ranks.items():
        # a rank that only repeats actions already known clean: one C-speed pass
        if all(map(context_free.get, map(id, actions))):
            continue
        defined: set[str] = set()
        for i, a in enumerate(actions):
            clean = context_free.get(id(a))
            if clean is None:
                clean = context_free[id(a)] = (
                    a.peer is None
                    and a.handle is None
                    and a.handles is None
                    and not any(_action_errors(trace, rank, a, set()))
                )
            if clean:
                continue
            for msg in _action_errors(trace, rank, a, defined):
                yield rank, i, msg


def _action_errors(trace: Trace, rank: int, a, defined: set[str]) -> Iterable[str]:
    w = trace.world_size
    op = a.op
    if a.group != WORLD and a.group not in trace.groups:
        yield f"undefined group '{a.group}'"
    if op in P2P_OPS:
        if a.peer is None:
            yield f"{op} needs 'peer'"
        elif not 0 <= a.peer < w:
            yield f"peer {a.peer} is outside 0..{w - 1}"
        elif a.peer == rank:
            yield f"{op} to itself (peer {rank})"
    elif a.peer is not None:
        yield f"'peer' is only for send/recv/isend/irecv, not {op}"
    if op in ROOTED_OPS:
        if a.root is None:
            yield f"{op} needs 'root'"
        elif not 0 <= a.root < w:
            yield f"root {a.root} is outside 0..{w - 1}"
    elif a.root is not None:
        yield f"'root' is only for broadcast/reduce/gather/scatter, not {op}"
    if a.is_async is not None and op not in COLLECTIVE_OPS and op not in ASYNC_P2P_OPS:
        yield f"'async' is only for collectives, not {op}"
    if op in ASYNC_P2P_OPS and a.is_async is False:
        yield f"{op} is always async"
    if a.handle is not None:
        if op in ASYNC_P2P_OPS or (op in COLLECTIVE_OPS and a.is_async is not False):
            defined.add(a.handle)
        else:
            yield f"'handle' is only for isend/irecv and async collectives, not {op}"
    if op == "wait":
        if not a.handles:
            yield "wait needs 'handles'"
        for h in a.handles or []:
            if h not in defined:
                yield f"wait on undefined handle '{h}' (no earlier async op of rank {rank})"
    elif a.handles is not None:
        yield "'handles' is only for wait"
    if (a.in_splits is not None or a.out_splits is not None) and op != "all_to_all":
        yield f"'in_splits'/'out_splits' are only for all_to_all, not {op}"
    if a.group == WORLD or a.group in trace.groups:
        size = len(trace.group_ranks(a.group))
        for name in ("in_splits", "out_splits"):
            splits = getattr(a, name)
            if splits is not None and len(splits) != size:
                yield f"{name} has {len(splits)} entries; group '{a.group}' has {size} ranks"


def _fast_ranks(ranks: Any) -> dict[int, list[Action]] | None:
    """`ranks` validated with one pydantic call per *distinct* action; the ranks' lists share
    the (frozen) action objects, as generated plans do. None when anything is off: the full
    validation then names the problem exactly as before."""
    if not isinstance(ranks, dict):
        return None
    by_id: dict[int, Action] = {}
    by_value: dict[tuple, Action] = {}
    keep: list[Any] = []  # the dicts whose ids are cached stay alive while the ids are used
    out: dict[int, list[Action]] = {}
    validate = SharedAction.model_validate
    for key, acts in ranks.items():
        if key.__class__ is int:
            rank = key
        elif key.__class__ is str and key.isascii() and key.isdigit():
            rank = int(key)
        else:
            return None
        if acts.__class__ is not list or rank in out:
            return None
        # the ranks of a plan mostly repeat actions already validated: one C-speed pass
        converted = list(map(by_id.get, map(id, acts)))
        if all(converted):  # (`None in` would call each action's __eq__)
            out[rank] = converted
            continue
        converted = []
        append = converted.append
        for d in acts:
            a = by_id.get(id(d))
            if a is None:
                if d.__class__ is not dict:
                    return None
                try:
                    value = tuple(
                        (k, v.__class__, tuple(v) if v.__class__ is list else v)
                        for k, v in d.items()
                    )
                    hash(value)
                except TypeError:
                    value = None
                a = by_value.get(value) if value is not None else None
                if a is None:
                    try:
                        a = validate(d)
                    except ValidationError:
                        return None
                    if value is not None:
                        by_value[value] = a
                by_id[id(d)] = a
                keep.append(d)
            append(a)
        out[rank] = converted
    return out


def trace_from_data(
    data: Any,
    path: str | None = None,
    lines: LineMap | None = None,
    allow_paths: Iterable[str] = (),
) -> Trace:
    """Validate parsed plan data (a trace, or a `generate:` block) into a `Trace`.

    Files a `generate:` block names must lie in the plan's folder or one of `allow_paths`.

    Actions equal in every field are one shared, immutable `SharedAction`: replace an action
    (`trace.ranks[r][i] = a.model_copy(update=...)`) rather than change it in place."""
    lines = lines or LineMap()
    if not isinstance(data, dict):
        raise CommlintInputError("a plan file must be a mapping with 'version' and 'ranks'", path)
    if "generate" in data:
        other = [key for key in data if key not in ("version", "generate")]
        if other:  # whichever wins, the other part of the file would be silently ignored
            key = str(other[0])[:80]
            raise CommlintInputError(
                f"'{key}' cannot be given with 'generate': a plan is either written out "
                "(world_size, groups, ranks…) or generated from its 'generate' block, not both",
                path,
                lines.key_line(key),
            )
        return _generate(data, path, lines, allow_paths)
    trace = None
    ranks = _fast_ranks(data.get("ranks", {}))
    if ranks is not None:
        try:
            trace = Trace.model_validate({k: v for k, v in data.items() if k != "ranks"})
            trace.ranks = ranks
        except ValidationError:
            trace = None
    if trace is None:
        try:
            trace = Trace.model_validate(data)
        except ValidationError as exc:
            errors = _validation_errors(exc, path, lines)
            raise errors[0] from None
    for rank, index, msg in semantic_errors(trace):
        prefix = action_ref(trace, rank, index)
        line = None
        if rank is not None:
            line = lines.action_line(rank, index) if index is not None else lines.rank_line(rank)
        else:
            line = lines.key_line("groups")
        raise CommlintInputError(f"{prefix}: {msg}" if prefix else msg, path, line)
    return trace


def _generate(
    data: dict[str, Any], path: str | None, lines: LineMap, allow_paths: Iterable[str]
) -> Trace:
    # loaded only for plans that have the block: the generator is large
    from commlint.plans.generate import generate_from_spec

    spec = data["generate"]
    version = data.get("version", 1)
    if version != 1:
        raise CommlintInputError(f"unsupported plan version {version!r}", path, 1)
    if not isinstance(spec, dict):
        raise CommlintInputError("'generate' must be a mapping", path, lines.key_line("generate"))
    try:
        return generate_from_spec(spec, path, allow_paths)
    except CommlintInputError as exc:
        exc.error.path = exc.error.path or path
        exc.error.line = exc.error.line or lines.key_line("generate")
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise CommlintInputError(f"generate: {exc}", path, lines.key_line("generate")) from None


def load_trace(path: str | Path, allow_paths: Iterable[str] = ()) -> LoadedTrace:
    """Read and validate one plan file. Raises `CommlintInputError` with a located message.

    Files the plan names (`generate.schedule.csv`) must lie in its folder or one of
    `allow_paths`."""
    name = str(path)
    text = read_text(path, what="a plan file")
    data, lines = _parse(text, name, name.endswith(".json"))
    return LoadedTrace(trace_from_data(data, name, lines, allow_paths), name, lines)


def loads_trace(
    text: str, is_json: bool = False, path: str | None = None, allow_paths: Iterable[str] = ()
) -> Trace:
    """Parse a plan from a string (files it names are relative to the working folder when
    `path` is None, and must lie within it or one of `allow_paths`)."""
    data, lines = _parse(text, path, is_json)
    return trace_from_data(data, path, lines, allow_paths)


def input_problem(path: str | Path) -> str | None:
    """Why a path given as input cannot be read as a file or folder, else None. Checked
    before anything opens it: reading a FIFO named `plan.json` would block forever."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        if p.is_symlink():
            return "broken symbolic link or symbolic link loop"
        return "no such file or directory"
    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
        return None
    return "not a regular file (a FIFO, socket or device): not read"


def iter_plan_files(paths: Iterable[str]) -> Iterable[tuple[str, str | None]]:
    """Expand folders to their plan files; yields (path, error) pairs."""
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(
                f for f in path.rglob("*") if f.suffix in PLAN_SUFFIXES and not f.is_dir()
            )
            if not found:
                yield str(path), "no *.yaml, *.yml or *.json plan files in this folder"
            for f in found:
                yield str(f), input_problem(f)
        else:
            yield str(path), input_problem(path)
