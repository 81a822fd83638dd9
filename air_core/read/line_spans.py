"""Line files cut into byte spans, and which records each span owns. Pure: numbers and bytes in, numbers out.

A large uncompressed file of records, one per line (JSON Lines, CSV, text),
is cut into spans of `SPAN_BYTES` at fixed offsets, the same for every grid,
so a span's copy in the node cache serves any later run. A record belongs to
the span that holds the newline before it (the file's first record, to the
first span), as Hadoop's line reader has it: a span starting inside a record
skips to its first newline, and its last record runs on past its end, to the
next newline. Every record then belongs to exactly one span, whoever reads it,
and a span never needs the byte before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

SPAN_BYTES = 16 << 20
# A span's last record runs on into what follows it: read that in steps of this many bytes.
TAIL_BYTES = 64 << 10


@dataclass(frozen=True)
class Span:
    """Bytes [start, stop) of listing file `file`, the `index`-th span of it; `whole`: the file, read whole.

    `num_rows`: the records it owns, once counted (-1 before; counts are
    needed only where every rank must get as many rows).
    """

    file: int
    index: int
    start: int
    stop: int
    whole: bool = False
    num_rows: int = -1

    @property
    def nbytes(self) -> int:
        """The bytes it covers."""
        return self.stop - self.start


def spans(files: Sequence[int], sizes: Sequence[int], whole: Sequence[bool], span_bytes: int = SPAN_BYTES) -> list[Span]:
    """The spans of `files` (listing positions) of `sizes` bytes, in order; a file with `whole` set is one span.

    Empty files have none.
    """
    out = []
    for file, size, one in zip(files, sizes, whole):
        if one or size <= span_bytes:
            if size:
                out.append(Span(file, 0, 0, size, whole=one))
            continue
        count = -(-size // span_bytes)
        out += [Span(file, k, k * span_bytes, min(size, (k + 1) * span_bytes)) for k in range(count)]
    return out


def first_record(data: bytes, start: int) -> int | None:
    """Where in `data`, a span's bytes from file offset `start`, its first own record begins; None: it owns none.

    The file's first span starts with its first record; any other span's
    records start after a newline inside it (after its last byte, when that is
    the newline: then its one record lies wholly past its end).
    """
    if start == 0:
        return 0
    at = data.find(b"\n")
    return None if at < 0 else at + 1


def tail_end(chunk: bytes) -> int | None:
    """How many bytes of `chunk` (what follows a span) its last record still takes: through the first newline;
    None: all of it, and maybe more."""
    at = chunk.find(b"\n")
    return None if at < 0 else at + 1
