"""Importers: plans and traces written by other tools, read into a `commlint.trace.Trace`.

- `load_flight_recorder(folder)`: PyTorch Flight Recorder dumps (one per rank);
- `load_nnscaler(folder)`: nnScaler's generated `gencode{rank}.py` files (read, never run);
- `load_pipelining_csv(path)`: `torch.distributed.pipelining` schedule CSVs;
- `load_sketchdlc(folder)`: SketchDLC per-node parameter-server trace files.

`detect_format(path)` names the format of a path; `load_any(path, fmt="auto")` reads any of
them, plain plan files included.
"""

from __future__ import annotations

from commlint.plans.importers.detect import FORMATS, detect_format, load_any
from commlint.plans.importers.flight_recorder import load_flight_recorder

__all__ = [
    "FORMATS",
    "detect_format",
    "load_any",
    "load_flight_recorder",
    "load_nnscaler",
    "load_pipelining_csv",
    "load_sketchdlc",
]


def __getattr__(name: str):
    # The heavier readers (LibCST for nnScaler) load on first use.
    if name == "load_nnscaler":
        from commlint.plans.importers.nnscaler import load_nnscaler

        return load_nnscaler
    if name == "load_pipelining_csv":
        from commlint.plans.importers.pipelining_csv import load_pipelining_csv

        return load_pipelining_csv
    if name == "load_sketchdlc":
        from commlint.plans.importers.sketchdlc import load_sketchdlc

        return load_sketchdlc
    raise AttributeError(name)
