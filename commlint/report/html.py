"""`--format html`: one self-contained page — findings with their sites, the wait-for cycles
drawn, and a Flight-Recorder-style rank × sequence grid per process group.

The page has no external URL (no fonts, scripts or images fetched): CSS and SVG are inline,
tooltips are `title` attributes. The grid needs the traces, not only the findings: callers pass
`options["traces"] = {path: Trace}` (`commlint plan` does). Without traces the page lists the
findings only.

Grid: one table per process group; a row per member rank, a column per position in that
rank's sequence on the group (the i-th collective meets the i-th of every member, as the
checker matches them). Cells are coloured per op; a column whose members disagree (op, root,
dtype, size) is marked as a mismatch; a member that has no entry where others do shows a
dashed *missing* cell; actions named by a finding (the blocked ones, the mismatched ones) are
outlined in red with the finding's code.
"""

from __future__ import annotations

import math
from collections import defaultdict
from html import escape as _html_escape
from typing import IO, Any

from commlint.findings import CycleEdge, Finding, Report
from commlint.report.common import printable
from commlint.trace import COLLECTIVE_OPS, P2P_OPS, WORLD, Action, Trace

MAX_ROWS = 64
BLOCKING_CODES = ("CL201", "CL202", "CL210")
MAX_COLS = 160
MAX_GROUPS = 16

OP_COLOURS = {
    "all_reduce": "#4e79a7",
    "all_gather": "#59a14f",
    "reduce_scatter": "#76b7b2",
    "broadcast": "#b07aa1",
    "reduce": "#9c755f",
    "gather": "#8cd17d",
    "scatter": "#d4a6c8",
    "all_to_all": "#f28e2b",
    "barrier": "#79706e",
    "send": "#edc948",
    "isend": "#f1ce63",
    "recv": "#8cc5b5",
    "irecv": "#b9e0d4",
    "wait": "#d7d7d7",
    "sync": "#bab0ac",
}
OP_SHORT = {
    "all_reduce": "AR",
    "all_gather": "AG",
    "reduce_scatter": "RS",
    "broadcast": "BC",
    "reduce": "RD",
    "gather": "GA",
    "scatter": "SC",
    "all_to_all": "A2A",
    "barrier": "BAR",
    "wait": "W",
    "sync": "SY",
}
DARK_TEXT = {"send", "isend", "recv", "irecv", "wait", "sync", "all_to_all", "gather", "scatter"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d1d1f;
background:#f6f7f9}
header{background:#1f2937;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px}
header .sum{margin-top:4px;color:#cbd5e1}
main{padding:16px 24px}
section.input{background:#fff;border:1px solid #e2e5ea;border-radius:8px;margin:0 0 22px;
padding:12px 18px}
h2{font-size:17px;margin:6px 0 10px;word-break:break-all}
h3{font-size:15px;margin:16px 0 6px}
.ok{color:#15803d;font-weight:600}
.finding{border-left:5px solid #dc2626;background:#fef2f2;padding:8px 12px;margin:8px 0;
border-radius:4px}
.finding.warning{border-color:#d97706;background:#fffbeb}
.code{font-weight:700;font-family:ui-monospace,Menlo,Consolas,monospace}
.msg{margin:3px 0}
.where{font:12px ui-monospace,Menlo,Consolas,monospace;color:#374151;word-break:break-all}
.fix{color:#374151;margin:3px 0}
.fix b{color:#065f46}
ul.sites{margin:4px 0 2px 18px;padding:0;font-family:ui-monospace,Menlo,Consolas,monospace;
font-size:12px}
.models{color:#6b7280;font-size:12px}
.cycle{display:flex;align-items:center;gap:18px;margin:6px 0;flex-wrap:wrap}
.cycle ol.edges{margin:0;padding-left:22px;font-size:13px;max-width:900px}
.cycle ol.edges .site{font:12px ui-monospace,Menlo,Consolas,monospace;color:#374151;
word-break:break-all}
.gridwrap{overflow-x:auto;max-width:100%;border:1px solid #e5e7eb;border-radius:6px;
background:#fff}
table.grid{border-collapse:separate;border-spacing:2px;font:11px ui-monospace,Menlo,Consolas,
monospace}
table.grid th{position:sticky;left:0;background:#f3f4f6;padding:2px 6px;text-align:right;
font-weight:600;white-space:nowrap}
table.grid thead th{position:static;text-align:center;color:#6b7280;font-weight:400}
table.grid thead th.mm{color:#b91c1c;font-weight:700;background:#fee2e2}
td.c{min-width:34px;height:22px;text-align:center;border-radius:3px;color:#fff;
white-space:nowrap;padding:0 3px}
td.c.dark{color:#1f2937}
td.c.mm{box-shadow:inset 0 0 0 2px #b91c1c}
td.c.hit{outline:3px solid #dc2626;outline-offset:-1px;font-weight:700}
td.c.blocked{position:relative}
td.c.blocked::after{content:"";position:absolute;top:0;right:0;border-style:solid;
border-width:0 9px 9px 0;border-color:transparent #dc2626 transparent transparent}
td.c.miss{background:repeating-linear-gradient(45deg,#fff,#fff 4px,#fecaca 4px,#fecaca 8px);
border:1px dashed #dc2626;color:#b91c1c}
td.e{min-width:34px}
.legend span{display:inline-block;padding:1px 6px;margin:2px 4px 2px 0;border-radius:3px;
font:11px ui-monospace,Menlo,Consolas,monospace;color:#fff}
.legend span.dark{color:#1f2937}
.legend .hitk{outline:3px solid #dc2626;color:#1f2937;background:#fff}
.legend .mmk{box-shadow:inset 0 0 0 2px #b91c1c;color:#1f2937;background:#fff}
.legend .missk{border:1px dashed #dc2626;color:#b91c1c;background:#fee2e2}
.note{color:#6b7280;font-size:12px}
.errors{background:#fff7ed;border:1px solid #fdba74;padding:8px 12px;border-radius:6px}
"""


def escape(text: str) -> str:
    """HTML-escaped, with controls and bidi overrides shown as escapes (a name stays data);
    a newline is `&#10;` (tooltips keep their lines, the page source its own)."""
    return _html_escape(printable(text, keep="\n\t")).replace("\n", "&#10;")


def _cell_text(a: Action) -> str:
    if a.op in P2P_OPS:
        arrow = "→" if a.op in ("send", "isend") else "←"
        prefix = "i" if a.op.startswith("i") else ""
        return f"{prefix}{'S' if arrow == '→' else 'R'}{arrow}{a.peer}"
    return OP_SHORT.get(a.op, a.op)


def _title(rank: int, index: int, a: Action) -> str:
    parts = [f"rank {rank} · action {index}: {a.describe()}"]
    if a.shape is not None or a.dtype:
        parts.append(f"{a.shape or ''} {a.dtype or ''}".strip())
    if a.label:
        parts.append(a.label)
    if a.site:
        parts.append(f"@ {a.site}")
    for frame in (a.stack or [])[:4]:
        parts.append(f"  {frame}")
    return "\n".join(parts)


def _lanes(trace: Trace) -> dict[str, dict[int, list[tuple[int, Action]]]]:
    """group → rank → [(action index, action)] in issue order; waits join their op's group."""
    lanes: dict[str, dict[int, list[tuple[int, Action]]]] = defaultdict(lambda: defaultdict(list))
    for rank in sorted(trace.ranks):
        for i, a in enumerate(trace.ranks[rank]):
            if a.op in ("wait", "sync"):
                continue
            lanes[a.group][rank].append((i, a))
    return lanes


def _signature(a: Action) -> tuple:
    return (a.op, a.root, a.dtype, a.payload_bytes())


def _odd_ranks(trace: Trace, lanes: dict[str, dict[int, list[tuple[int, Action]]]]) -> set[int]:
    """Ranks that differ from the majority of their group at some position, or lack an entry
    the others have: the ones a truncated grid must still show."""
    odd: set[int] = set()
    for group, lane in lanes.items():
        members = trace.group_ranks(group) if (group == WORLD or group in trace.groups) else []
        width = max((len(v) for v in lane.values()), default=0)
        for k in range(min(width, MAX_COLS)):
            sigs: dict[tuple, list[int]] = defaultdict(list)
            for r in members:
                entries = lane.get(r, [])
                sigs[_signature(entries[k][1]) if k < len(entries) else ("missing",)].append(r)
            if len(sigs) > 1:
                majority = max(sigs.values(), key=len)
                odd.update(r for rs in sigs.values() if rs is not majority for r in rs)
    return odd


def _pick_rows(rows: list[int], odd: set[int], hits: dict[tuple[int, int], list[str]]) -> list:
    """At most MAX_ROWS ranks: the odd ones first, then those named by findings, then the rest."""
    hit_ranks = {r for (r, _) in hits}
    keep = [r for r in rows if r in odd][: MAX_ROWS // 2]
    keep += [r for r in rows if r in hit_ranks and r not in keep][: MAX_ROWS // 2]
    keep += [r for r in rows if r not in keep][: MAX_ROWS - len(keep)]
    return sorted(keep)


def _grid(
    trace: Trace,
    group: str,
    lanes: dict[int, list[tuple[int, Action]]],
    hits: dict[tuple[int, int], list[str]],
    odd: set[int],
) -> str:
    members = trace.group_ranks(group) if (group == WORLD or group in trace.groups) else []
    rows = sorted(set(members) | set(lanes))
    truncated_rows = False
    if len(rows) > MAX_ROWS:
        rows = _pick_rows(rows, odd, hits)
        truncated_rows = True
    width = max((len(v) for v in lanes.values()), default=0)
    cols = min(width, MAX_COLS)
    collective = {
        k
        for k in range(cols)
        if any(k < len(lanes.get(r, [])) and lanes[r][k][1].op in COLLECTIVE_OPS for r in rows)
    }
    mismatch = set()
    for k in collective:
        sigs = {
            _signature(lanes[r][k][1])
            for r in members
            if k < len(lanes.get(r, [])) and lanes[r][k][1].op in COLLECTIVE_OPS
        }
        if len(sigs) > 1:
            mismatch.add(k)
    # Columns are numbered from 1, as Flight Recorder's collective_seq_id: the first
    # collective a group sees is #1 there and here.
    out = [
        '<div class="gridwrap"><table class="grid"><thead><tr>'
        '<th title="rows: ranks; columns: sequence number on this group, from 1">rank \\ #</th>'
    ]
    for k in range(cols):
        cls = ' class="mm"' if k in mismatch else ""
        tip = ' title="members disagree on op, root, dtype or size"' if k in mismatch else ""
        out.append(f"<th{cls}{tip}>{k + 1}</th>")
    out.append("</tr></thead><tbody>")
    for r in rows:
        lane = lanes.get(r, [])
        out.append(f"<tr><th>{r}</th>")
        for k in range(cols):
            if k < len(lane):
                i, a = lane[k]
                classes = ["c"]
                if a.op in DARK_TEXT:
                    classes.append("dark")
                if k in mismatch:
                    classes.append("mm")
                codes = hits.get((r, i))
                text = escape(_cell_text(a))
                title = f"#{k + 1} on {group} · " + _title(r, i, a)
                if codes:
                    classes.append("hit")
                    title += "\n" + "; ".join(codes)
                    if any(c in BLOCKING_CODES for c in codes):
                        classes.append("blocked")  # the rank is stuck here
                colour = OP_COLOURS.get(a.op, "#999")
                out.append(
                    f'<td class="{" ".join(classes)}" style="background:{colour}" '
                    f'title="{escape(title)}" data-rank="{r}" data-action="{i}" '
                    f'data-op="{a.op}">{text}</td>'
                )
            elif k in collective and r in members:
                out.append(
                    f'<td class="c miss" title="rank {r} never issues collective #{k + 1} on '
                    f'{escape(group)}" data-rank="{r}" data-missing="{k + 1}">?</td>'
                )
            else:
                out.append('<td class="e"></td>')
        out.append("</tr>")
    out.append("</tbody></table></div>")
    notes = []
    if truncated_rows:
        notes.append(f"showing {len(rows)} of {len(set(members) | set(lanes))} ranks")
    if width > cols:
        notes.append(f"showing the first {cols} of {width} positions")
    if notes:
        out.append(f'<p class="note">{escape("; ".join(notes))}</p>')
    return "".join(out)


def _rank_grid(trace: Trace, hits: dict[tuple[int, int], list[str]], odd: set[int]) -> str:
    """Every action of each rank in issue order, across groups: shows cross-group orders."""
    rows = sorted(trace.ranks)
    if len(rows) > MAX_ROWS:
        rows = _pick_rows(rows, odd, hits)
    width = max((len(trace.ranks[r]) for r in rows), default=0)
    cols = min(width, MAX_COLS)
    out = ['<div class="gridwrap"><table class="grid ranks"><thead><tr><th>rank</th>']
    out.extend(f"<th>{k}</th>" for k in range(cols))
    out.append("</tr></thead><tbody>")
    for r in rows:
        out.append(f"<tr><th>{r}</th>")
        acts = trace.ranks[r]
        for k in range(cols):
            if k >= len(acts):
                out.append('<td class="e"></td>')
                continue
            a = acts[k]
            classes = ["c"] + (["dark"] if a.op in DARK_TEXT else [])
            title = _title(r, k, a)
            codes = hits.get((r, k))
            if codes:
                classes.append("hit")
                title += "\n" + "; ".join(codes)
                if any(c in BLOCKING_CODES for c in codes):
                    classes.append("blocked")
            text = _cell_text(a)
            if a.op not in ("wait", "sync") and a.group != WORLD:
                text += f" {a.group}"
            out.append(
                f'<td class="{" ".join(classes)}" style="background:'
                f'{OP_COLOURS.get(a.op, "#999")}" title="{escape(title)}" data-rank="{r}" '
                f'data-action="{k}" data-op="{a.op}">{escape(text)}</td>'
            )
        out.append("</tr>")
    out.append("</tbody></table></div>")
    notes = []
    if len(rows) < len(trace.ranks):
        notes.append(f"showing {len(rows)} of {len(trace.ranks)} ranks")
    if width > cols:
        notes.append(f"showing the first {cols} of {width} actions")
    if notes:
        out.append(f'<p class="note">{escape("; ".join(notes))}</p>')
    return "".join(out)


def _cycle_svg(cycle: list[CycleEdge]) -> str:
    """Ranks on a circle, one numbered arrow per wait-for edge; the edges are listed in text
    next to it (HTML, so long sites wrap instead of being clipped)."""
    n = len(cycle)
    size = 200 if n <= 2 else 240 if n <= 4 else 300
    cx = cy = size / 2
    radius = size / 2 - 34
    pos: dict[int, tuple[float, float]] = {}
    for k, e in enumerate(cycle):
        angle = -math.pi / 2 + 2 * math.pi * k / n
        pos[e.rank] = (cx + radius * math.cos(angle), cy + radius * math.sin(angle))
    parts = [
        f'<svg width="{size}" height="{size}" viewBox="0 0 {size} {size}" role="img" '
        f'aria-label="wait-for cycle of ranks {" ".join(str(e.rank) for e in cycle)}">',
        '<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" '
        'fill="#dc2626"/></marker></defs>',
    ]
    node_r = 18
    for k, e in enumerate(cycle):
        x1, y1 = pos[e.rank]
        x2, y2 = pos.get(e.waits_for, (cx, cy))
        dx, dy = x2 - x1, y2 - y1
        dist = math.hypot(dx, dy) or 1
        # bend each edge a little so that the two arrows of a 2-cycle do not overlap
        mx, my = (x1 + x2) / 2 - dy / dist * 26, (y1 + y2) / 2 + dx / dist * 26
        sx, sy = x1 + dx / dist * node_r, y1 + dy / dist * node_r
        ex, ey = x2 - dx / dist * (node_r + 2), y2 - dy / dist * (node_r + 2)
        parts.append(
            f'<path class="edge" d="M{sx:.1f},{sy:.1f} Q{mx:.1f},{my:.1f} {ex:.1f},{ey:.1f}" '
            'fill="none" stroke="#dc2626" stroke-width="2" marker-end="url(#arr)"/>'
        )
        parts.append(
            f'<text x="{mx:.1f}" y="{my + 4:.1f}" font-size="12" font-weight="700" '
            f'text-anchor="middle" fill="#7f1d1d">{k + 1}</text>'
        )
    for e in cycle:
        x, y = pos[e.rank]
        parts.append(
            f'<circle class="node" cx="{x:.1f}" cy="{y:.1f}" r="{node_r}" fill="#1f2937"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" font-size="13" text-anchor="middle" '
            f'fill="#fff">{e.rank}</text>'
        )
    parts.append("</svg>")
    items = []
    for e in cycle:
        site = f' <span class="site">@{escape(e.site)}</span>' if e.site else ""
        items.append(
            f"<li>rank <b>{e.rank}</b> waits in <code>{escape(e.op)}</code>{site} "
            f"for rank <b>{e.waits_for}</b></li>"
        )
    return f'<div class="cycle">{"".join(parts)}<ol class="edges">{"".join(items)}</ol></div>'


def _finding(f: Finding) -> str:
    cls = "finding" if f.severity == "error" else "finding warning"
    out = [
        f'<div class="{cls}" data-code="{escape(f.code)}">',
        f'<div><span class="code">{escape(f.code)}</span> {escape(f.name)} '
        f"<small>[{escape(f.severity)}]</small>"
        f"{' · ranks ' + escape(', '.join(map(str, f.ranks))) if f.ranks else ''}</div>",
    ]
    where = _where(f)
    if where:
        out.append(f'<div class="where">{escape(where)}</div>')
    out.append(f'<p class="msg">{escape(f.message)}</p>')
    if f.cycle:
        out.append(_cycle_svg(f.cycle))
    sites = []
    for loc in f.actions:
        where = f"rank {loc.rank} · action {loc.action}"
        if loc.site:
            where += f" · {loc.site}"
        elif loc.path and loc.line:
            where += f" · {loc.path}:{loc.line}"
        sites.append(f"<li>{escape(where)}</li>")
    for loc in f.related:
        text = loc.message or ""
        if loc.path and loc.line:
            text = f"{loc.path}:{loc.line} {text}"
        if text:
            sites.append(f"<li>note: {escape(text)}</li>")
    if sites:
        out.append(f'<ul class="sites">{"".join(sites)}</ul>')
    if f.fix:
        out.append(f'<p class="fix"><b>fix:</b> {escape(f.fix)}</p>')
    if f.models:
        out.append(f'<div class="models">model: {escape(", ".join(f.models))}</div>')
    out.append("</div>")
    return "".join(out)


def _where(f: Finding) -> str | None:
    """`file:line:col` of the finding, else the call site of the first action it names."""
    if f.path:
        return f.where()
    for site in [loc.site for loc in f.actions] + [e.site for e in f.cycle or ()]:
        if site:
            return site
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _legend(ops: set[str]) -> str:
    spans = []
    for op in sorted(ops, key=lambda o: list(OP_COLOURS).index(o) if o in OP_COLOURS else 99):
        dark = ' class="dark"' if op in DARK_TEXT else ""
        spans.append(f'<span{dark} style="background:{OP_COLOURS.get(op, "#999")}">{op}</span>')
    spans.append('<span class="hitk">named by a finding (corner: blocked there)</span>')
    spans.append('<span class="mmk">mismatch</span>')
    spans.append('<span class="missk">missing</span>')
    return f'<div class="legend">{"".join(spans)}</div>'


def _trace_section(path: str, trace: Trace | None, findings: list[Finding]) -> str:
    out = [f'<section class="input" data-path="{escape(path)}"><h2>{escape(path)}</h2>']
    if trace is not None:
        meta = f"{trace.world_size} ranks · {trace.num_actions()} actions"
        if trace.source:
            meta += f" · from {trace.source}"
        if trace.backend:
            meta += f" · backend {trace.backend}"
        out.append(f'<p class="note">{escape(meta)}</p>')
        out.extend(f'<p class="note provenance">{escape(n)}</p>' for n in _provenance(trace))
    if findings:
        out.extend(_finding(f) for f in findings)
    else:
        out.append('<p class="ok">No findings.</p>')
    if trace is not None:
        hits: dict[tuple[int, int], list[str]] = defaultdict(list)
        for f in findings:
            for loc in f.actions:
                if loc.rank is not None and loc.action is not None:
                    hits[(loc.rank, loc.action)].append(f.code)
        lanes = _lanes(trace)
        ops = {a.op for acts in trace.ranks.values() for a in acts}
        out.append(_legend(ops))
        out.append('<h3 class="issue-order">Issue order per rank, all groups</h3>')
        odd = _odd_ranks(trace, lanes) if len(trace.ranks) > MAX_ROWS else set()
        out.append(_rank_grid(trace, hits, odd))
        out.append("<h3>Rank × sequence, per process group</h3>")
        named = {trace.ranks[r][i].group for (r, i) in hits if r in trace.ranks}
        order = sorted(lanes, key=lambda g: (g != WORLD, g))
        if len(order) > MAX_GROUPS:
            order.sort(key=lambda g: g not in named)  # stable: WORLD, then by name
            rest = order[MAX_GROUPS:]
            order = order[:MAX_GROUPS]
            out.append(
                f'<p class="note">{len(rest) + len(order)} groups: showing the '
                f"{len(order)} that findings name first; not shown: "
                f"{escape(', '.join(rest[:40]))}{' …' if len(rest) > 40 else ''}</p>"
            )
        for group in order:
            members = trace.group_ranks(group) if (group == WORLD or group in trace.groups) else []
            out.append(
                f'<h3 class="group" data-group="{escape(group)}">{escape(group)} '
                f'<small class="note">ranks {escape(_ranks(members))}</small></h3>'
            )
            out.append(_grid(trace, group, lanes[group], hits, odd))
    out.append("</section>")
    return "".join(out)


def _provenance(trace: Trace) -> list[str]:
    """What an importer left out or guessed, in one line each (from `trace.meta`)."""
    notes: list[str] = []
    fr = trace.meta.get("flight_recorder")
    if isinstance(fr, dict):
        dropped = fr.get("dropped_entries") or {}
        if dropped:
            total = sum(int(n) for n in dropped.values())
            notes.append(
                f"Flight Recorder: {total} entries (all ranks together) completed on every member "
                "(or evicted from some rank's buffer) are not shown."
            )
        if fr.get("states_recorded") is False:
            notes.append(
                "Flight Recorder: entry states were not recorded (gloo): where each rank stops "
                "is the checker's replay, not the dump's."
            )
        stuck = fr.get("stuck_at") or {}
        if stuck:
            where = "; ".join(f"rank {r}: {s}" for r, s in sorted(stuck.items())[:16])
            notes.append(f"Flight Recorder, first unfinished entry per rank: {where}.")
        if fr.get("inferred_groups"):
            notes.append(
                "Flight Recorder: pg_config was empty; members of "
                f"{', '.join(fr['inferred_groups'])} were inferred from the ranks that used them."
            )
        if fr.get("unknown_ops"):
            notes.append(f"Flight Recorder: ops not understood: {', '.join(fr['unknown_ops'])}.")
    pipe = trace.meta.get("pipelining")
    if isinstance(pipe, dict) and pipe.get("fsdp_actions_not_checked"):
        notes.append(
            f"pipelining: {pipe['fsdp_actions_not_checked']} UNSHARD/RESHARD/REDUCE_GRAD "
            "actions (FSDP collectives on a group the CSV does not describe) are not checked."
        )
    return notes


def _ranks(members: list[int]) -> str:
    if members and members == list(range(members[0], members[-1] + 1)) and len(members) > 3:
        return f"{members[0]}–{members[-1]}"
    return ", ".join(map(str, members))


def render(report: Report, traces: dict[str, Trace] | None = None) -> str:
    """The whole page as a string."""
    traces = traces or {}
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for f in report.findings:
        by_path[f.path or "<trace>"].append(f)
    paths = list(traces) + [p for p in by_path if p not in traces]
    # Inputs with findings first (errors before warnings), so the problem is above the fold;
    # the order of the command line is kept otherwise.
    paths.sort(key=lambda p: _rank_of(by_path.get(p, [])))
    s = report.summary()
    n_findings, n_errors, n_warnings = int(s["findings"]), int(s["errors"]), int(s["warnings"])
    summary = (
        f"{_plural(n_findings, 'finding')} ({_plural(n_errors, 'error')}, "
        f"{_plural(n_warnings, 'warning')}) in {report.checked} checked"
    )
    if report.errors:
        summary += f"; {_plural(len(report.errors), 'input error')}"
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>commlint report</title>",
        f"<style>{CSS}</style></head><body>",
        f'<header><h1>commlint report</h1><div class="sum">{escape(summary)}</div></header>',
        "<main>",
    ]
    if report.errors:
        items = "".join(f"<li>{escape(e.one_line())}</li>" for e in report.errors)
        body.append(f'<div class="errors"><b>Input errors</b><ul>{items}</ul></div>')
    if not paths and not report.errors:
        body.append('<p class="ok">All checks passed.</p>')
    for path in paths:
        body.append(_trace_section(path, traces.get(path), by_path.get(path, [])))
    body.append("</main></body></html>")
    return "\n".join(body) + "\n"


def _rank_of(findings: list[Finding]) -> int:
    if any(f.severity == "error" for f in findings):
        return 0
    return 1 if findings else 2


def write(report: Report, stream: IO[str], options: dict[str, Any]) -> None:
    stream.write(render(report, options.get("traces")))
