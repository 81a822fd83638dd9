"""A `.json` file's records: the objects of its one top-level array (LLaVA's and ShareGPT4V's files, which can be
GBs), or its top-level objects one after another (JSON Lines, pretty-printed or not).

Such a file is not split at newlines: a record may span many lines, and a
span starting inside the array cannot tell where its objects begin. So one
pass over the file finds each top-level object's bytes (`scan`), and the
index (`ObjectIndex`: two int64 arrays, 16 bytes a record) is kept like a
listing, in the node cache's `manifests/objects/` folder, named by the file's
version and mapped by every process of the node; one process of the node makes
it (the others wait on its lock). The file is read for it through the node
cache, span by span, so its bytes cross the network once per node, and the
spans are those the records are then read from. A span owns the objects that
start in it, read from its cached copy and the next spans' as far as its last
object runs; `as_lines` gives them to the JSON Lines parser, one a line.

`scan` is vectorised: numpy passes over each span's bytes.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from filelock import FileLock

from ..errors import RecordError

_MAGIC = b"AIROBJS1"
_OPEN, _CLOSE, _OPEN_LIST, _CLOSE_LIST = ord("{"), ord("}"), ord("["), ord("]")
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_WHITESPACE = b" \t\r\n"

_held: dict[str, ObjectIndex] = {}  # by index file: the indexes this process has mapped
_making = threading.Lock()


@dataclass(frozen=True)
class ObjectIndex:
    """Where each record of a file lies: bytes [starts[i], ends[i])."""

    starts: np.ndarray
    ends: np.ndarray

    def within(self, start: int, stop: int) -> tuple[int, int]:
        """The records [i, j) that start in bytes [start, stop)."""
        return int(np.searchsorted(self.starts, start)), int(np.searchsorted(self.starts, stop))

    def save(self, file: str) -> None:
        """Write the index to `file` atomically."""
        tmp = f"{file}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + len(self.starts).to_bytes(8, "little"))
            f.write(np.ascontiguousarray(self.starts, dtype=np.int64).data)
            f.write(np.ascontiguousarray(self.ends, dtype=np.int64).data)
        os.replace(tmp, file)

    @classmethod
    def load(cls, file: str) -> ObjectIndex | None:
        """The index saved in `file`, mapped; None where there is none (or not a whole one)."""
        try:
            with open(file, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # missing, or empty
            return None
        n = int.from_bytes(mapped[8:16], "little")
        if mapped[:8] != _MAGIC or len(mapped) != 16 + 16 * n:
            return None
        return cls(np.frombuffer(mapped, np.int64, n, 16), np.frombuffer(mapped, np.int64, n, 16 + 8 * n))


def index_file(root: str, vpath: str, size: int, mtime_ns: int) -> str:
    """Where the index of this version of the file lies in the node cache at `root`."""
    key = hashlib.sha256(f"{vpath}\0{size}\0{mtime_ns}".encode()).hexdigest()[:32]
    return os.path.join(root, "manifests", "objects", f"{key}.objects")


def held(file: str) -> ObjectIndex | None:
    """The index at `file` if this process holds it or it is on disk; None: not made yet."""
    index = _held.get(file)
    if index is None:
        index = ObjectIndex.load(file)
        if index is not None:
            _held[file] = index
    return index


def index_of(file: str, blocks: Callable[[], Iterable[memoryview | bytes]], vpath: str) -> ObjectIndex:
    """The index at `file`, made from `blocks()` (the file's bytes, in order) by one process of the node if it is
    not there yet.

    Raises:
        RecordError: the file holds no JSON object (or an array of other values), or ends inside one.
    """
    index = held(file)
    if index is not None:
        return index
    with _making:  # one thread of the process makes it; the node's other processes wait on its lock
        index = held(file)
        if index is not None:
            return index
        os.makedirs(os.path.dirname(file), mode=0o700, exist_ok=True)
        with FileLock(f"{file}.lock"):
            index = held(file)
            if index is None:
                scan(blocks(), vpath).save(file)
                index = held(file)
    assert index is not None
    return index


def scan(blocks: Iterable[memoryview | bytes], vpath: str) -> ObjectIndex:
    """The records of a `.json` file whose bytes are `blocks`, in order: the objects of its top-level array, or its
    top-level objects. Pure.

    Raises:
        RecordError: it holds no object, its array holds other values, or it ends inside a record.
    """
    starts, ends = [], []
    state = _State()
    for block in blocks:
        s, e = state.scan(np.frombuffer(block, dtype=np.uint8))
        starts.append(s)
        ends.append(e)
    out = ObjectIndex(np.concatenate(starts) if starts else np.zeros(0, np.int64),
                      np.concatenate(ends) if ends else np.zeros(0, np.int64))
    if state.depth != 0 or state.in_string:
        raise RecordError(f"{vpath} ends inside a JSON value (at depth {state.depth}): the file is cut short or not "
                          "JSON; fix or replace it, or leave it out with exclude=")
    if not len(out.starts) and state.seen:
        raise RecordError(f"{vpath} holds no JSON object: a .json file of records holds an array of objects (or "
                          "objects one after another); leave it out with exclude=")
    if len(out.starts) != len(out.ends) or state.strays:
        raise RecordError(f"{vpath} holds values other than objects in its top-level array: each record is a JSON "
                          "object; fix the file, or leave it out with exclude=")
    return out


class _State:
    """What a scan carries from one block to the next."""

    def __init__(self) -> None:
        self.offset = 0  # the file offset of the next block
        self.depth = 0
        self.in_string = False
        self.backslashes = 0  # inside a string, the backslashes that end the last block
        self.top: int | None = None  # the depth records open at: 1 inside an array, 0 at the top; None: not seen yet
        self.seen = False  # a byte other than whitespace was met
        self.strays = False  # a value other than an object lies where records do

    def scan(self, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the records that start, and of those that end, in the block `b`."""
        offset, self.offset = self.offset, self.offset + len(b)
        if self.top is None:
            first = _first_byte(b)
            if first is None:
                return np.zeros(0, np.int64), np.zeros(0, np.int64)
            self.seen = True
            self.top = 1 if first == _OPEN_LIST else 0
        quotes = np.flatnonzero(b == _QUOTE)
        quotes = quotes[~self._escaped(b, quotes)]
        structural = np.flatnonzero((b == _OPEN) | (b == _CLOSE) | (b == _OPEN_LIST) | (b == _CLOSE_LIST))
        # A structural byte lies outside strings where an even number of real quotes (after the carried state)
        # precede it in the block.
        outside = ((np.searchsorted(quotes, structural) + self.in_string) % 2) == 0
        structural = structural[outside]
        kinds = b[structural]
        step = np.where((kinds == _OPEN) | (kinds == _OPEN_LIST), 1, -1)
        after = self.depth + np.cumsum(step)
        before = after - step
        starts = structural[(kinds == _OPEN) & (before == self.top)]
        ends = structural[(kinds == _CLOSE) & (after == self.top)] + 1
        # A value other than an object where records lie: an array opening there, or a string's quote at that depth.
        at_quotes = np.concatenate([[self.depth], after])[np.searchsorted(structural, quotes)]
        if ((kinds == _OPEN_LIST) & (before == self.top)).any() or (at_quotes == self.top).any():
            self.strays = True
        if len(after):
            self.depth = int(after[-1])
        self.in_string = bool((len(quotes) + self.in_string) % 2)
        self._carry(b)
        return starts.astype(np.int64) + offset, ends.astype(np.int64) + offset

    def _escaped(self, b: np.ndarray, quotes: np.ndarray) -> np.ndarray:
        """Which of `quotes` follow an odd run of backslashes (the run may begin in the last block): the runs are
        measured a step at a time for all the quotes that still have a backslash before them."""
        run = np.zeros(len(quotes), np.int64)
        alive = np.flatnonzero(quotes > 0)
        alive = alive[b[quotes[alive] - 1] == _BACKSLASH]
        while len(alive):
            run[alive] += 1
            at = quotes[alive] - run[alive] - 1
            start = at < 0  # the run reaches the block's start: it goes on in the last block
            run[alive[start]] += self.backslashes
            alive = alive[~start]
            alive = alive[b[at[~start]] == _BACKSLASH]
        if len(quotes) and quotes[0] == 0:
            run[0] += self.backslashes
        return run % 2 == 1

    def _carry(self, b: np.ndarray) -> None:
        """The backslashes that end the block, where it ends inside a string."""
        if not self.in_string:
            self.backslashes = 0
            return
        run = len(b) - 1
        while run >= 0 and b[run] == _BACKSLASH:
            run -= 1
        trailing = len(b) - 1 - run
        self.backslashes = self.backslashes + trailing if run < 0 else trailing


def _first_byte(b: np.ndarray) -> int | None:
    rest = bytes(b[:4096]).lstrip(_WHITESPACE)
    if rest:
        return rest[0]
    if len(b) > 4096:
        return _first_byte(b[4096:])
    return None


def as_lines(data: bytes | memoryview, starts: np.ndarray, ends: np.ndarray) -> bytes:
    """The records at `starts`/`ends` of `data` (offsets in it, the first at 0, the last ending at its end) as
    JSON Lines of the same length: the bytes between records become one newline and spaces, and newlines inside
    a record spaces (JSON has none inside its strings). An offset in the result is the same offset in `data`."""
    out = np.frombuffer(data, dtype=np.uint8).copy()
    out[(out == 10) | (out == 13)] = 32
    gaps = np.zeros(len(out) + 1, np.int64)
    np.add.at(gaps, ends[:-1], 1)
    np.add.at(gaps, starts[1:], -1)
    between = np.cumsum(gaps[:-1]) > 0
    out[between] = 32
    out[ends[:-1]] = 10
    return out.tobytes()


def spans_of(size: int, span_bytes: int, start: int, stop: int) -> Iterator[tuple[int, int]]:
    """The spans (fixed bytes of `span_bytes` from the file's start) that hold bytes [start, stop) of a file of
    `size` bytes."""
    for lo in range(start - start % span_bytes, stop, span_bytes):
        yield lo, min(size, lo + span_bytes)


__all__ = ["ObjectIndex", "as_lines", "held", "index_file", "index_of", "scan", "spans_of"]
