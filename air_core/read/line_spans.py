"""Line files cut into byte spans, and which records each span owns. Pure: numbers and bytes in, numbers out.

A large uncompressed file of records, one per line (JSON Lines, CSV, text),
is cut into spans of `SPAN_BYTES` at fixed offsets, the same for every grid,
so a span's copy in the node cache serves any later run. A record belongs to
the span that holds the newline before it (the file's first record, to the
first span), as Hadoop's line reader has it: a span starting inside a record
skips to its first newline, and its last record runs on past its end, to the
next newline. Every record then belongs to exactly one span, whoever reads it,
and a span never needs the byte before it.

Inferred types come from a sample of whole records at the start of the
listing (`sample_prefixes`, `sample_records`): the first bytes of its first
files, read by range, so every process infers from the same bytes and none
reads a span it does not own for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

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


class Spans(Sequence[Span]):
    """Every span of a listing's files, in order (file by file), each made when asked for.

    Held as each file's count of spans (a cumulative sum), not as objects: a
    folder of 10^7 small files is one array of 80 MB in every process that
    plans it, made in a vectorised pass, where a list of `Span`s took 1.6 GB
    and two minutes. `nbytes` and `of_files` answer for all spans at once.
    """

    def __init__(self, sizes: np.ndarray, whole: np.ndarray, span_bytes: int = SPAN_BYTES) -> None:
        self._sizes = np.asarray(sizes, dtype=np.int64)
        self._whole = np.asarray(whole, dtype=bool)
        self._span_bytes = span_bytes
        one = self._whole | (self._sizes <= span_bytes)
        counts = np.where(one, self._sizes > 0, -(-self._sizes // span_bytes)).astype(np.int64)
        self._ends = np.cumsum(counts)  # spans of files [0, f] = ends[f]; empty files have none
        self._nbytes: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        file = int(np.searchsorted(self._ends, k, side="right"))
        index = k - (int(self._ends[file - 1]) if file else 0)
        size, whole = int(self._sizes[file]), bool(self._whole[file])
        start = index * self._span_bytes
        return Span(file, index, start, size if whole else min(size, start + self._span_bytes), whole=whole)

    def nbytes(self) -> np.ndarray:
        """The bytes each span covers, in order (computed once: every epoch's share is dealt by them)."""
        if self._nbytes is None:
            counts = np.diff(self._ends, prepend=0)
            if len(self) == np.count_nonzero(counts):  # a span a file (small files): each covers its file
                self._nbytes = self._sizes[counts > 0]
            else:
                files = np.repeat(np.arange(len(counts)), counts)
                start = (np.arange(len(self)) - np.repeat(self._ends - counts, counts)) * self._span_bytes
                sizes = self._sizes[files]
                self._nbytes = np.where(self._whole[files], sizes, np.minimum(sizes, start + self._span_bytes) - start)
        return self._nbytes

    def of_files(self, files: Sequence[int]) -> list[Span]:
        """The spans of `files` (listing positions), file by file in the order given."""
        files = np.asarray(files, dtype=np.int64)
        firsts = np.where(files > 0, self._ends[files - 1], 0)
        return [self[int(k)] for a, b in zip(firsts.tolist(), self._ends[files].tolist()) for k in range(a, b)]

    def firsts(self) -> Iterator[Span]:
        """The first span of each non-empty file, in listing order, made as they are taken."""
        for file in np.flatnonzero(self._sizes > 0).tolist():
            yield self[int(self._ends[file - 1]) if file else 0]


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


def sample_prefixes(sizes: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """The first bytes of a listing's first files that make a sample of `budget` bytes: (file, how many of its
    first bytes), in listing order; every non-empty file whole, until one holds more than is left of `budget`.

    The same on every process for one listing, so each is one entry of the node cache (a file taken whole, the
    file's own entry), read from the volume once per node however many processes infer from it.
    """
    out: list[tuple[int, int]] = []
    left, step = budget, 4096  # in steps: a listing of 10^7 files is not looked at past what the sample takes
    for at in range(0, len(sizes), step):
        chunk = np.asarray(sizes[at:at + step], dtype=np.int64)
        for k in np.flatnonzero(chunk > 0).tolist():
            take = min(int(chunk[k]), left)
            out.append((at + k, take))
            left -= take
            if not left:
                return out
    return out


def sample_records(data: bytes, budget: int, *, complete: bool, first: bool) -> bytes:
    """The whole records at the start of `data` (a file's records from its start; `complete`: they end with a
    whole record, as at the file's end) that fit in `budget` bytes; where none fits and `first` (the sample's
    first file, which must give at least one record), its first record, which `data` must then hold whole.
    """
    if complete and len(data) <= budget:
        return data
    end = data.rfind(b"\n", 0, budget) + 1
    if end or not first:
        return data[:end]
    end = data.find(b"\n") + 1
    return data[:end] if end else data
