"""Flight Recorder dumps → `Trace`: explain a hang after the fact with the same checker.

PyTorch's Flight Recorder keeps, per rank, a ring buffer of the collectives and p2p ops it
scheduled, and dumps it on a watchdog timeout (one pickle per rank, `<prefix><rank>`; or JSON
from `_dump_fr_trace_json`). This reader aligns the dumps the way the job ran them:

- every dump is checked field by field before it is used (a located error names the file and
  the entry); pickles are read by an unpickler that loads no class and so runs no code, and
  the walk over a dump has a budget proportional to its size (shared references cannot make a
  small file cost unbounded work);
- process-group membership comes only from what the dumps say (each rank's own `pg_config`,
  so one group name may stand for different ranks on different ranks) or from `groups=`;
  a group whose members nobody states is an input error naming it, never a guess;
- entries are read in `record_id` order (the rank's issue order, across every process group);
- collectives meet by process group and `collective_seq_id` (the per-group sequence the
  checker also matches by); p2p ops by channel, in order (`p2p_seq_id` only groups a batch);
- entries older than the oldest one every member still holds are dropped (ring-buffer
  eviction); a prefix of entries that are `completed` on every member is done and dropped too
  (`keep_completed=True` keeps them) — after their sizes and dtypes were compared: a completed
  collective whose ranks disagree corrupted data silently (`dump_findings`);
- every rank with a dump ends where its dump ends: the rank was alive but issued nothing more,
  so a peer waiting for it is a *missing rank* (CL202), not a rank that finished;
- each action's `site` is the innermost frame of the user's code (not torch, not the standard
  library); `label` carries the group's sequence id (Flight Recorder's numbering) and state.

Sizes and dtypes of actions come from `input_sizes` / `input_dtypes`; outputs and all_to_all
totals are compared here (`dump_findings`). Flight Recorder does not record the root of rooted
collectives: the reader uses the group's first rank and says so in the label.

The stages, one module each: `flight_recorder_files` (which files, reading without running
code) -> `flight_recorder_entries` (one dump checked field by field) -> `flight_recorder_groups`
(membership) -> `flight_recorder_align` (per-rank alignment, eviction) ->
`flight_recorder_payloads` (sizes and dtypes) -> `flight_recorder_lower` (the `Trace`). This
module reads a folder end to end (`load_flight_recorder`) and places the findings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from commlint.findings import CommlintInputError, Finding, Location
from commlint.gc_pause import paused_gc
from commlint.plans.gate import numbers_located, read_text
from commlint.plans.importers.flight_recorder_align import _aligned_entries as _aligned_entries
from commlint.plans.importers.flight_recorder_entries import _checked_dump, _valid_ranks, user_frame
from commlint.plans.importers.flight_recorder_files import (
    DUMP_SUFFIXES,
    MARKERS,
    OP_NAMES,
    SHARE_AFTER,
    _Bad,
    _reader,
    _short,
    dump_files,
    dump_rank,
    looks_like_dump,
    read_dump,
)
from commlint.plans.importers.flight_recorder_lower import _to_trace, dumps_to_trace
from commlint.trace import Trace


def load_flight_recorder(
    path: str | Path,
    *,
    groups: Mapping[str, Iterable[int]] | None = None,
    world_size: int | None = None,
    prefix: str | None = None,
    keep_completed: bool = False,
) -> Trace:
    """Read a folder of per-rank Flight Recorder dumps (or one dump file) into a `Trace`.

    `groups` maps a process group's name or description (`WORLD` or `default_pg` for the
    default group) to its global ranks, for dumps that do not say (gloo leaves `pg_config`
    empty). `world_size` gives the default group's size. Raises a located
    `CommlintInputError` for a malformed dump or a group whose members are not known."""
    root = Path(path)
    if root.is_dir():
        files = dump_files(root, prefix)
        if not files:
            raise CommlintInputError(
                "no Flight Recorder dumps in this folder (expected files named <prefix><rank>)",
                str(root),
            )
    elif root.is_file():
        rank = dump_rank(root)
        files = {rank if rank is not None else 0: root}
    else:
        raise CommlintInputError("no such file or directory", str(root))
    with paused_gc():  # millions of small dicts: the cyclic collector would rescan them
        # one raw dump at a time: only what the checked entries keep stays in memory; past
        # SHARE_AFTER entries, equal kept frames are shared (see `_kept_frames`)
        checked = {}
        seen = 0
        payloads: dict[bytes, tuple] = {}
        for rank, f in files.items():
            try:
                data = read_dump(f)
            except CommlintInputError as exc:  # a truncated or unreadable dump is not "no dump"
                if len(files) > 1:
                    exc.error.message = f"rank {rank}: {exc.error.message}"
                raise
            with numbers_located(str(f)):
                checked[rank] = _checked_dump(
                    data,
                    str(f),
                    share=seen >= SHARE_AFTER,
                    reread=_reader(f),
                    payloads=payloads,
                )
            seen += len(checked[rank][0])
        with numbers_located(str(root)):
            return _to_trace(
                checked,
                groups=groups,
                world_size=world_size,
                keep_completed=keep_completed,
                path=str(root),
                files={r: str(f) for r, f in files.items()},
            )


# --- findings: at the user's source line, the dump entry beside it ---------------------------


def dump_findings(trace: Trace) -> list[Finding]:
    """What the reader itself found (sizes and dtypes the trace cannot carry: outputs,
    all_to_all totals, collectives that completed with disagreeing buffers), located."""
    fr = trace.meta.get("flight_recorder")
    if not isinstance(fr, dict):
        return []
    out = [Finding(**f) for f in fr.get("findings") or ()]
    for f in out:
        f.path = fr.get("path")
    return out


def locate_findings(trace: Trace, findings: Iterable[Finding]) -> None:
    """Point each finding of a Flight Recorder trace at the source line its dump names (the
    user's frame of the first action that has one); the dump file and entry of every action
    become related locations. Findings without a source line keep the dump as their place."""
    fr = trace.meta.get("flight_recorder")
    if not isinstance(fr, dict):
        return
    files = fr.get("files") or {}
    entry_of = fr.get("entry_of") or {}
    for f in findings:
        related: list[Location] = []
        primary: tuple[str, int] | None = None
        for loc in f.actions:
            if loc.rank is None:
                continue
            entry = None
            if loc.action is not None and loc.rank in entry_of:
                column = entry_of[loc.rank]
                if 0 <= loc.action < len(column) and column[loc.action] >= 0:
                    entry = column[loc.action]
            what = loc.message if loc.message and "entry" in loc.message else None
            if what is None and entry is not None:
                what = f"Flight Recorder entry {entry}"
            file = files.get(loc.rank)
            if file:
                related.append(
                    Location(path=file, rank=loc.rank, message=f"rank {loc.rank}: "
                             f"{what or 'Flight Recorder dump'}")
                )  # fmt: skip
            site_path, site_line = _split_site(loc.site)
            if site_line is not None:
                loc.path, loc.line = site_path, site_line
                primary = primary or (site_path, site_line)
        if primary is None:
            for e in f.cycle or ():
                site_path, site_line = _split_site(e.site)
                if site_line is not None:
                    primary = (site_path, site_line)
                    break
        if primary is not None:
            f.path, f.line, f.col = primary[0], primary[1], None
        seen = {(r.path, r.message) for r in f.related}
        f.related.extend(r for r in related if (r.path, r.message) not in seen)


def _split_site(site: str | None) -> tuple[str, int | None]:
    if not site or ":" not in site:
        return "", None
    file, _, line = site.rpartition(":")
    return file, int(line) if line.isdigit() else None


# --- the command line: --groups, and what `commlint plan` does with the findings -------------

_GROUPS_FILE_LIMIT = 16 << 20


def read_groups_option(value: str) -> dict[str, list[int]]:
    """`--groups FILE|JSON`: a JSON object `{"name or description": [global ranks], …}`
    given inline, or a JSON/YAML file holding one (or a plan file, whose `groups:` is used).
    Raises a `CommlintInputError` naming `--groups` (and the file) when it is not that."""
    text = value.strip()
    source = None
    if not text.startswith("{"):
        source = value
        try:  # the input gate: a regular file of at most 16 MB (a FIFO would block)
            text = read_text(value, _GROUPS_FILE_LIMIT, "a --groups file")
        except CommlintInputError as exc:
            raise CommlintInputError(f"--groups: {exc.error.message}", source) from None
    try:
        if source is None or str(source).endswith(".json"):
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except RecursionError:
        raise CommlintInputError("--groups: nested too deeply", source) from None
    except Exception as exc:
        raise CommlintInputError(
            f"--groups: not JSON or YAML: {_short(exc).splitlines()[0]}", source
        ) from None
    if isinstance(data, dict) and isinstance(data.get("groups"), dict):
        data = data["groups"]
    if not isinstance(data, dict):
        raise CommlintInputError(
            "--groups: expected an object mapping a group's name or description to its "
            'global ranks, e.g. {"1": [0, 1], "WORLD": [0, 1]}',
            source,
        )
    out: dict[str, list[int]] = {}
    for key, ranks in data.items():
        if not isinstance(ranks, list) or not all(
            isinstance(r, int) and not isinstance(r, bool) for r in ranks
        ):
            raise CommlintInputError(
                f"--groups: group '{key}' must be a list of global ranks (integers)", source
            )
        try:
            out[str(key)] = list(_valid_ranks(tuple(ranks), str(key)))
        except _Bad as exc:
            raise CommlintInputError(f"--groups: {exc}", source) from None
    return out


def finish_findings(trace: Trace, findings: list[Finding]) -> None:
    """After `check_trace` on a Flight Recorder trace: add the reader's own findings
    (`dump_findings`) and point every finding at the source line its dump names."""
    findings.extend(dump_findings(trace))
    locate_findings(trace, findings)


__all__ = [
    "DUMP_SUFFIXES",
    "MARKERS",
    "OP_NAMES",
    "SHARE_AFTER",
    "dump_files",
    "dump_findings",
    "dump_rank",
    "dumps_to_trace",
    "finish_findings",
    "load_flight_recorder",
    "locate_findings",
    "looks_like_dump",
    "read_dump",
    "read_groups_option",
    "user_frame",
]
