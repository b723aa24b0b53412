"""Process groups of Flight Recorder dumps, from what the dumps (each rank's own `pg_config`)
or the user (`--groups`) say: one group name may stand for different ranks on different
ranks; a group whose members nobody states is an input error naming it, never a guess.

Third stage of `commlint.plans.importers.flight_recorder` (after `flight_recorder_entries`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from operator import itemgetter
from pathlib import Path
from typing import Any

from commlint.findings import CommlintInputError
from commlint.plans.importers.flight_recorder_entries import _Columns, _valid_ranks
from commlint.plans.importers.flight_recorder_files import WORLD_KEYS, _Bad
from commlint.trace import WORLD

# --- process groups: only what the dumps (or the user) say ----------------------------------


def _is_default(name: str, desc: str) -> bool:
    """torch names the default group "0" and describes it `default_pg`."""
    return desc == "default_pg" or name == "0"


class _Instance:
    """One process group as the ranks that use it know it: a pg name and its members."""

    __slots__ = ("default", "desc", "members", "name", "trace_name")

    def __init__(self, name: str, desc: str, members: tuple[int, ...], default: bool) -> None:
        self.name, self.desc, self.members, self.default = name, desc, members, default
        self.trace_name = ""


class _Groups:
    """Process groups of the job: (rank, pg name) → the group instance that rank used."""

    def __init__(
        self,
        checked: Mapping[int, tuple[_Columns, dict[str, tuple[str, Any]], Any]],
        given: Mapping[str, Iterable[int]] | None,
        world_size: int | None,
        where: Any,
    ) -> None:
        given_ranks = _given(given)
        default_given = next((given_ranks[k] for k in WORLD_KEYS if k in given_ranks), None)
        configs = {r: c for r, (_, c, _) in checked.items()}
        known_world = world_size
        if known_world is None and default_given is not None:
            known_world = len(default_given)
        if known_world is None:
            for cfg in configs.values():
                for name, (desc, ranks) in cfg.items():
                    if ranks and _is_default(name, desc):
                        known_world = len(ranks)
                        break
        by_name: dict[str, set[tuple[int, ...]]] = {}
        for cfg in configs.values():
            for name, (_, ranks) in cfg.items():
                if ranks:
                    by_name.setdefault(name, set()).add(ranks)
        self.instances: dict[tuple[str, tuple[int, ...]], _Instance] = {}
        self.of: dict[tuple[int, str], _Instance] = {}
        self.by_rank: dict[int, dict[str, _Instance]] = {}
        missing: dict[str, tuple[str, int, int]] = {}  # pg name → (desc, first rank, entry)
        for rank in sorted(checked):
            cols, cfg, _ = checked[rank]
            # each pg name with its first entry (the reversed dict keeps the first position)
            firsts = dict(zip(reversed(cols.pg), range(len(cols) - 1, -1, -1), strict=True))
            seen = {n: cols.index[i] for n, i in sorted(firsts.items(), key=itemgetter(1))}
            for name, first in seen.items():
                desc = cfg.get(name, ("", None))[0] or _desc_of(cols, name)
                default = _is_default(name, desc)
                members = given_ranks.get(name)
                if members is None and desc and desc in given_ranks:
                    members = given_ranks[desc]
                if members is None and default and default_given is not None:
                    members = default_given
                if members is None:
                    members = cfg.get(name, ("", None))[1]
                if members is None and default and known_world is not None:
                    members = tuple(range(known_world))
                if members is None:
                    holding = [s for s in by_name.get(name, ()) if rank in s]
                    members = holding[0] if len(holding) == 1 else None
                if members is None:
                    missing.setdefault(name, (desc, rank, first))
                    continue
                if rank not in members:
                    raise CommlintInputError(
                        f"entry {first}: process group '{name}' has members "
                        f"{_short_list(members)}, which do not include this rank ({rank})",
                        where(rank),
                    )
                key = (name, members)
                inst = self.instances.get(key)
                if inst is None:
                    inst = self.instances[key] = _Instance(name, desc, members, default)
                self.of[(rank, name)] = inst
                self.by_rank.setdefault(rank, {})[name] = inst
        if missing:
            raise _unknown_members(missing, where, bool(given_ranks))
        top = max(
            [*checked, *(m for inst in self.instances.values() for m in inst.members[-1:])],
            default=0,
        )
        self.world_size = known_world or top + 1
        self._name_instances()

    def _name_instances(self) -> None:
        per_desc = Counter(
            i.desc for i in self.instances.values() if i.desc and i.desc != "undefined"
        )
        per_name = Counter(i.name for i in self.instances.values())
        taken: set[str] = {WORLD}
        for inst in sorted(self.instances.values(), key=lambda i: (i.name, i.members)):
            if inst.default and inst.members == tuple(range(self.world_size)):
                inst.trace_name = WORLD
                continue
            desc = inst.desc if inst.desc and inst.desc != "undefined" else ""
            if desc and per_desc[desc] == 1 and desc not in taken:
                name = desc
            elif desc:
                name = f"{desc}:{inst.name}"
            else:
                name = f"pg{inst.name}"
            if per_name[inst.name] > 1:  # one pg name, different members on different ranks
                name += f"@{inst.members[0]}"
            base, k = name, 1
            while name in taken:
                k += 1
                name = f"{base}.{k}"
            taken.add(name)
            inst.trace_name = name

    def trace_groups(self) -> dict[str, list[int]]:
        return {
            i.trace_name: list(i.members) for i in self.instances.values() if i.trace_name != WORLD
        }


def _desc_of(cols: _Columns, name: str) -> str:
    return next((d for pg, d in zip(cols.pg, cols.desc, strict=True) if pg == name and d), "")


def _given(given: Mapping[str, Iterable[int]] | None) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for key, ranks in (given or {}).items():
        try:
            values = tuple(ranks)
            if not all(isinstance(r, int) and not isinstance(r, bool) for r in values):
                raise _Bad(f"group '{key}': members must be integers")
            out[str(key)] = _valid_ranks(values, str(key))
        except TypeError:
            raise CommlintInputError(f"groups: '{key}' is not a list of ranks") from None
        except _Bad as exc:
            raise CommlintInputError(f"groups: {exc}") from None
    return out


def _short_list(ranks: tuple[int, ...]) -> str:
    if len(ranks) <= 8:
        return str(list(ranks))
    return f"[{', '.join(map(str, ranks[:8]))}, … ({len(ranks)} ranks)]"


def _unknown_members(
    missing: dict[str, tuple[str, int, int]], where: Any, had_groups: bool
) -> CommlintInputError:
    parts = []
    first_file = None
    for name, (desc, rank, entry) in missing.items():
        file = where(rank)
        first_file = first_file or file
        about = f"{desc}, " if desc and desc != "undefined" else ""
        of = "" if file == first_file else f" of {Path(str(file)).name}"
        parts.append(f"'{name}' ({about}first used by rank {rank} in entry {entry}{of})")
    example = ", ".join(
        f'"{WORLD if _is_default(n, d) else n}": [...]' for n, (d, _, _) in missing.items()
    )
    return CommlintInputError(
        "process group members are not in the dumps (gloo writes an empty pg_config): "
        f"{', '.join(parts)}; deciding whether the job deadlocked would mean guessing them"
        + (" (the groups given do not name them)" if had_groups else "")
        + f" — pass them with --groups '{{{example}}}' (group name or description, or "
        "WORLD → global ranks)",
        first_file,
    )
