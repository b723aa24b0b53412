"""Render the HTML report in headless Chromium and look at the pixels.

Skips only when Chromium is not installed (Debian: `apt-get install -y chromium`).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest

from commlint.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

PLAN = """\
version: 1
world_size: 2
groups: {tp: [0, 1], dp: [0, 1]}
ranks:
  0: [{op: all_reduce, group: tp, site: "train.py:41"}, {op: all_reduce, group: dp}]
  1: [{op: all_reduce, group: dp, site: "train.py:57"}, {op: all_reduce, group: tp}]
"""

RED = (0xDC, 0x26, 0x26)  # outlines, arrows: what a finding names
BLUE = (0x4E, 0x79, 0xA7)  # all_reduce cells
HEADER = (0x1F, 0x29, 0x37)


def read_png(path: Path) -> tuple[int, int, list[bytes], int]:
    """Width, height, rows and channels (3 or 4) of an 8-bit non-interlaced PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    width = height = 0
    channels = 3
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0
            channels = {2: 3, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows, channels


def count(rows: list[bytes], channels: int, rgb: tuple[int, int, int], tol: int = 12) -> int:
    n = 0
    for row in rows:
        for i in range(0, len(row), channels):
            if all(abs(row[i + k] - rgb[k]) <= tol for k in range(3)):
                n += 1
    return n


def test_report_renders_in_chromium(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    page = tmp_path / "report.html"
    assert main(["plan", str(plan), "--format", "html", "-o", str(page)]) == 1
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", f"--user-data-dir={profile}", f"--screenshot={shot}",
             "--window-size=900,800", str(page)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    width, height, rows, channels = read_png(shot)
    assert (width, height) == (900, 800)
    assert count(rows[:40], channels, HEADER) > 1000  # the dark header band
    assert count(rows, channels, BLUE) > 400  # coloured all_reduce cells
    assert count(rows, channels, RED) > 300  # cycle arrows and the outlines of blocked cells


FINDING_BG = (0xFE, 0xF2, 0xF2)  # the pale red of an error's card


def test_the_deadlock_is_above_the_fold(tmp_path, monkeypatch):
    """`commlint plan examples/`: the clean pipeline sorts first by name, but the input with a
    finding is drawn first, its card in the top 300 pixels."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    monkeypatch.chdir(examples.parent)
    page = tmp_path / "report.html"
    assert main(["plan", "examples", "--format", "html", "-o", str(page)]) == 1
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", f"--user-data-dir={profile}", f"--screenshot={shot}",
             "--window-size=1200,700", str(page)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    _, _, rows, channels = read_png(shot)
    first = next(
        (y for y, row in enumerate(rows) if count([row], channels, FINDING_BG, tol=2) > 200),
        None,
    )
    assert first is not None and first < 300, first
