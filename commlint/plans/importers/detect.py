"""Which format a path is in, and one entry point that reads any of them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from commlint.findings import CommlintInputError
from commlint.plans.io import PLAN_SUFFIXES, LineMap, LoadedTrace, load_trace

FORMATS = ("auto", "trace", "fr", "nnscaler", "pipelining-csv", "sketchdlc")
_GENCODE = re.compile(r"^gencode\d+\.py$")


def _head(path: Path, n: int = 4096) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def _is_sketchdlc(path: Path) -> bool:
    return b"OP:=" in _head(path)


def detect_format(path: str | Path) -> str:
    """`trace`, `fr`, `nnscaler`, `pipelining-csv` or `sketchdlc`, by content and name.

    A folder of `gencode{rank}.py` files is nnScaler; a folder of per-rank pickle/JSON dumps is
    Flight Recorder; a folder of `OP:=` record files is SketchDLC; any other folder holds plan
    files. A `.csv` file is a pipelining schedule.
    """
    from commlint.plans.importers.flight_recorder import dump_files, looks_like_dump

    p = Path(path)
    if p.is_dir():
        files = [f for f in p.iterdir() if f.is_file()]
        if any(_GENCODE.match(f.name) for f in files):
            return "nnscaler"
        try:
            if dump_files(p):
                return "fr"
        except CommlintInputError:
            return "fr"  # two dumps for one rank: the FR reader reports it
        if files and any(f.suffix in ("", ".txt", ".log") and _is_sketchdlc(f) for f in files):
            return "sketchdlc"
        return "trace"
    if p.suffix == ".csv":
        return "pipelining-csv"
    if _GENCODE.match(p.name):
        return "nnscaler"
    if p.suffix in (".yaml", ".yml"):
        return "trace"
    if p.exists() and looks_like_dump(p):
        return "fr"
    if p.exists() and _is_sketchdlc(p):
        return "sketchdlc"
    if p.suffix in PLAN_SUFFIXES:
        return "trace"
    return "trace"


def load_any(path: str | Path, fmt: str = "auto", allow_paths: Iterable[str] = ()) -> LoadedTrace:
    """Read one input in any supported format (`fmt` as in `FORMATS`); `allow_paths`: the
    folders besides a plan's own that files it names may come from."""
    if fmt not in FORMATS:
        raise CommlintInputError(
            f"unknown input format {fmt!r}; expected one of {', '.join(FORMATS)}", str(path)
        )
    if fmt == "auto":
        fmt = detect_format(path)
    name = str(path)
    if fmt == "trace":
        return load_trace(path, allow_paths)
    if fmt == "fr":
        from commlint.plans.importers.flight_recorder import load_flight_recorder

        return LoadedTrace(load_flight_recorder(path), name)
    if fmt == "nnscaler":
        from commlint.plans.importers.nnscaler import load_nnscaler

        return LoadedTrace(load_nnscaler(path), name)
    if fmt == "pipelining-csv":
        from commlint.plans.importers.pipelining_csv import load_pipelining_csv

        trace = load_pipelining_csv(path)
        # row r of the CSV is rank r: findings then carry a line, as for plan files (an
        # action's line falls back to its rank's; no rank is built to number its actions)
        lines = LineMap(ranks={r: r + 1 for r in trace.ranks})
        return LoadedTrace(trace, name, lines)
    from commlint.plans.importers.sketchdlc import load_sketchdlc

    return LoadedTrace(load_sketchdlc(path), name)
