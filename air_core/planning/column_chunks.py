"""Which bytes of a Parquet row group a read of some of its columns needs. Pure: names and offsets in, spans out.

A row group stores each leaf column as one contiguous chunk; a read of some
columns needs only their chunks. Chunks close together are fetched as one
span, as pyarrow's pre-buffering coalesces them: a request costs more than
the few bytes between them.
"""

from __future__ import annotations

from typing import Sequence

# pyarrow's `CacheOptions.hole_size_limit`: chunks at most this far apart are fetched as one span.
HOLE_BYTES = 8192
# Spans of one file fetched through one open, up to this many bytes together: about an open's round trip on the
# wire, so a batch takes not much longer than one span alone, and saves a round trip for each span but one.
ONE_OPEN_BYTES = 1 << 20

Span = tuple[int, int]


def selected(chunks: Sequence[tuple[str, int, int]], columns: Sequence[str]) -> list[Span]:
    """The spans of the chunks (`(path in the schema, start, stop)`) that `columns` read, coalesced.

    A column names its leaf chunks as pyarrow's `columns=` does: a leaf whose path is the name, or lies
    under it (`"a"` reads `a.b` and `a.list.element`)."""
    names = set(columns)
    wanted = [(a, b) for path, a, b in chunks if _under(path, names)]
    return coalesce(wanted)


def coalesce(spans: Sequence[Span], hole: int = HOLE_BYTES) -> list[Span]:
    """`spans` in order, those at most `hole` bytes apart (or overlapping) merged into one."""
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a - out[-1][1] <= hole:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def one_open_batches(ranges: Sequence[tuple[int, int, int]], limit: int = ONE_OPEN_BYTES
                     ) -> list[list[tuple[int, int, int]]]:
    """`ranges` (`(file, start, stop)`, in order) cut into batches, each fetched through one open of its file:
    consecutive ranges of one file, at most `limit` bytes together; a larger range is a batch of its own (a large
    range arrives faster through an open of its own, a volume's bandwidth being per open file)."""
    out: list[list[tuple[int, int, int]]] = []
    held = 0
    for r in ranges:
        n = r[2] - r[1]
        if out and out[-1][0][0] == r[0] and held + n <= limit:
            out[-1].append(r)
            held += n
        else:
            out.append([r])
            held = n if n <= limit else limit + 1
    return out


def _under(path: str, names: set[str]) -> bool:
    if path in names:
        return True
    parts = path.split(".")
    return any(".".join(parts[:i]) in names for i in range(1, len(parts)))
