"""Source bytes to text as CPython reads them (`tokenize.detect_encoding`: a UTF-8 BOM, a
coding cookie on line 1 or 2, else UTF-8), and back, for the edits of `--add-noqa`/`--fix`."""

from __future__ import annotations

import codecs
import io
import tokenize
from dataclasses import dataclass

BOM = codecs.BOM_UTF8


class Unreadable(Exception):
    """Bytes CPython refuses to decode: the line to report and a one-line message."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Decoded:
    text: str  # without the BOM (CPython's positions do not count it)
    encoding: str  # a codec name: "utf-8", "iso-8859-1", ...
    bom: bool

    def encode(self, text: str) -> bytes:
        """`text` (an edit of `self.text`) as bytes the way the file was written."""
        return (BOM if self.bom else b"") + text.encode(self.encoding)


def _cookie_line(data: bytes) -> int:
    """The line (1 or 2) of the coding declaration CPython read."""
    first = data.split(b"\n", 1)[0]
    return 1 if tokenize.cookie_re.match(first.decode("latin-1")) else 2


def decode_source(data: bytes) -> Decoded:
    """The text CPython compiles from `data`. A coding cookie CPython refuses (an unknown
    encoding, or one that contradicts a BOM) and bytes that are not valid in the declared
    encoding raise `Unreadable`, located at the declaration or at the bad byte."""
    bom = data.startswith(BOM)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        text = str(exc)
        if text.startswith("unknown encoding"):
            name = text.rsplit(":", 1)[-1].strip()
            raise Unreadable(_cookie_line(data), f"unknown encoding: {name}") from None
        if text.startswith("encoding problem"):
            first = data[len(BOM) :].split(b"\n", 2)
            head = b"\n".join(first[:2]).decode("latin-1")
            declared = next(
                (m[1] for m in map(tokenize.cookie_re.match, head.split("\n")) if m), "?"
            )
            raise Unreadable(
                _cookie_line(data[len(BOM) :]), f"encoding problem: {declared} with BOM"
            ) from None
        encoding = "utf-8"  # a first line that is not UTF-8: located below
    body = data[len(BOM) :] if bom else data
    codec = "utf-8" if encoding == "utf-8-sig" else encoding
    try:
        return Decoded(body.decode(codec), codec, bom)
    except UnicodeDecodeError as exc:
        line = body[: exc.start].count(b"\n") + 1
        offset = exc.start + (len(BOM) if bom else 0)
        what = "UTF-8" if codec == "utf-8" else codec
        raise Unreadable(line, f"not valid {what} ({exc.reason} at byte {offset})") from None
