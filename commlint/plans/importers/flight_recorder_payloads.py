"""Sizes and dtypes the checker cannot see: collectives that completed although their ranks
disagree (data corrupted silently), outputs, and all_to_all totals, compared as fr_trace
does, before completed entries are dropped.

Fifth stage of `commlint.plans.importers.flight_recorder` (beside the alignment)."""

from __future__ import annotations

from typing import Any

from commlint.findings import CommlintInputError, Finding, Location
from commlint.plans.importers.flight_recorder_align import _Collectives
from commlint.plans.importers.flight_recorder_entries import _Entry, _numel, _site
from commlint.plans.importers.flight_recorder_files import DTYPES, OP_NAMES, _Bad
from commlint.plans.importers.flight_recorder_groups import _short_list

# --- sizes and dtypes the checker cannot see --------------------------------------------------

# fr_trace's exemptions: an all_to_all's sizes differ by design, a gather's output and a
# scatter's input exist on the root only.
_NO_INPUT_COMPARE = {"all_to_all", "scatter"}
_NO_OUTPUT_COMPARE = {"all_to_all", "gather"}


def _total(shapes: list[list[int]]) -> int:
    return sum(_numel(s) for s in shapes)


def _by_value(values: dict[int, Any], sites: dict[int, str | None]) -> str:
    groups: dict[str, list[int]] = {}
    for r, v in values.items():
        groups.setdefault(str(v), []).append(r)
    parts = []
    for text, ranks in groups.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_short_list(tuple(ranks))}"
        site = sites.get(ranks[0])
        parts.append(f"{text} on {who}" + (f" @{site}" if site and len(ranks) <= 4 else ""))
    return ", ".join(parts)


def _consistent(op: str, in_sizes: list, out_sizes: list, k: int) -> bool:
    """One rank's entry adds up on its own (output from input and the group size)."""
    if not in_sizes or not out_sizes:
        return op != "all_to_all" or not (in_sizes or out_sizes)
    n_in, n_out = _total(in_sizes), _total(out_sizes)
    if op == "all_reduce":
        return in_sizes == out_sizes
    if op == "all_gather":
        return n_out == n_in * k
    if op == "reduce_scatter":
        return n_in == n_out * k
    if op == "all_to_all":
        return n_in == n_out
    return True


def _payload_problems(
    op: str,
    per: dict[int, list[_Entry]],
    members: tuple[int, ...],
    finished: bool,
    located: _Located,
) -> list[str]:
    """What disagrees in one aligned collective; input sizes and dtypes only when the entry
    was dropped as done (otherwise the checker compares them)."""
    sites = {r: located.site(r, es[0])[0] for r, es in per.items()}
    ins = {r: [list(s) for e in es for s in e.in_sizes] for r, es in per.items()}
    outs = {r: [list(s) for e in es for s in e.out_sizes] for r, es in per.items()}
    in_dt = {r: sorted({_dtype(d) for e in es for d in e.in_dtypes}) for r, es in per.items()}
    out_dt = {r: sorted({_dtype(d) for e in es for d in e.out_dtypes}) for r, es in per.items()}
    problems: list[str] = []
    inputs_differ = op not in _NO_INPUT_COMPARE and len({str(v) for v in ins.values()}) > 1
    in_dtypes_differ = len({str(v) for v in in_dt.values() if v}) > 1
    if finished and inputs_differ:
        problems.append(f"input sizes {_by_value(ins, sites)}")
    if finished and in_dtypes_differ:
        problems.append(f"input dtypes {_by_value(in_dt, sites)}")
    if not inputs_differ and op not in _NO_OUTPUT_COMPARE:
        present = {r: v for r, v in outs.items() if v and v != [[]]}
        if len({str(v) for v in present.values()}) > 1:
            problems.append(f"output sizes {_by_value(present, sites)}")
    if not in_dtypes_differ:
        present_dt = {r: v for r, v in out_dt.items() if v}
        if len({str(v) for v in present_dt.values()}) > 1:
            problems.append(f"output dtypes {_by_value(present_dt, sites)}")
    k = len(members)
    for r in per:
        n_in, n_out = _total(ins[r]), _total(outs[r])
        if not ins[r] or not outs[r]:
            continue
        if op == "all_reduce" and ins[r] != outs[r]:
            problems.append(f"rank {r} reduces input {ins[r]} into output {outs[r]}")
        elif op == "all_gather" and n_out != n_in * k:
            problems.append(
                f"rank {r} gathers {n_in} elements from each of {k} ranks into an output of {n_out}"
            )
        elif op == "reduce_scatter" and n_in != n_out * k:
            problems.append(
                f"rank {r} scatters an input of {n_in} elements into {k} outputs of {n_out}"
            )
    if op == "all_to_all" and set(per) == set(members):
        sent = sum(_total(v) for v in ins.values())
        received = sum(_total(v) for v in outs.values())
        if sent != received and all(outs.values()):
            problems.append(
                f"the ranks send {sent} elements in total but expect to receive {received}"
            )
    return problems


def _dtype(name: str) -> str:
    return DTYPES.get(name, name.lower())


class _Located:
    """Where entries went: (rank, id(entry)) → action index, and each rank's dump file."""

    def __init__(self, where: Any) -> None:
        self.where = where
        self.action: dict[tuple[int, int], int] = {}

    def site(self, rank: int, e: _Entry) -> tuple[str | None, list[str]]:
        try:
            return _site(e)
        except _Bad as exc:
            raise CommlintInputError(f"entry {e.index}: {exc}", self.where(rank)) from None


def _payload_findings(
    colls: _Collectives, members_of: dict[str, tuple[int, ...]], located: _Located
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    suspect = set(colls.differ)
    adds_up: dict[tuple[str, int, int], bool] = {}  # (op, payload, group size): payloads shared
    for key, payload in colls.first_items():
        raw = payload[0]
        if key in suspect:
            continue
        op = OP_NAMES.get(raw)
        if op is None:
            continue
        k = len(members_of.get(key[0], ()))
        ok = adds_up.get((op, id(payload), k))
        if ok is None:
            ok = adds_up[(op, id(payload), k)] = _consistent(op, payload[1], payload[2], k)
        if not ok:
            suspect.add(key)  # every rank agrees with this entry, which does not add up
    if not suspect:
        return out
    table = colls.by_rank(suspect)
    firsts: dict[int, list[_Entry]] = {}
    for per in table.values():
        for r, es in per.items():
            firsts.setdefault(r, []).append(es[0])
    for r, es in firsts.items():  # the frames of the entries named: each dump read once
        try:
            es[0].cols.fetch(e.pos for e in es)
        except _Bad as exc:
            raise CommlintInputError(f"entry {es[0].index}: {exc}", located.where(r)) from None
    for (group, seq), per in sorted(table.items()):
        op = OP_NAMES.get(next(iter(per.values()))[0].raw)
        if op is None or op == "barrier":
            continue
        if len({OP_NAMES.get(es[0].raw) for es in per.values()}) != 1:
            continue  # different collectives: the checker's CL203
        done = colls.finished((group, seq))
        problems = _payload_problems(op, per, members_of.get(group, ()), done, located)
        if not problems:
            continue
        if done:
            effect = (
                "It completed on every rank, so nothing hung: the data is silently wrong "
                "(the ranks combined buffers that do not fit together)."
            )
        else:
            effect = "NCCL hangs or writes past a buffer; gloo fails or corrupts data."
        message = f"{op} #{seq} on group '{group}' disagrees: {'; '.join(problems)}. {effect}"
        locations = []
        for r in sorted(per):
            e = per[r][0]
            locations.append(
                Location(
                    rank=r,
                    action=located.action.get((r, id(e))),
                    site=located.site(r, e)[0],
                    message=f"Flight Recorder entry {e.index} ({e.state or 'no state'})",
                ).model_dump(exclude_none=True)
            )
        from commlint.rules import rule_of

        rule = rule_of("CL204")
        out.append(
            Finding(
                code=rule.code,
                name=rule.name,
                severity=rule.severity,
                message=message,
                ranks=sorted(per),
                actions=[Location(**loc) for loc in locations],
                fix="Give every rank buffers of the same shape and dtype for this call (inputs "
                "and outputs; for all_to_all, what the ranks send in total must equal what they "
                "receive); look for a size computed differently on some rank just before it.",
            ).model_dump(exclude_none=True)
        )
    return out
