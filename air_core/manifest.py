"""A sorted, fingerprinted listing of a volume folder, in flat arrays: what every rank plans from.

A listing (`air_core.io.listing` makes one) can hold 10^7 files, and every rank
and DataLoader worker of a node plans from it, so it is not a list of Python
objects: paths are one UTF-8 blob with offsets, sizes and mtimes are int64
arrays. Saved to a file, it is
memory-mapped by every process that loads it, so a node holds its pages once
(in the page cache) however many processes read it. Python strings are made
only for the paths a process asks for.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from collections.abc import Sequence as SequenceABC
from functools import cached_property
from typing import Iterable, Iterator, Sequence

import numpy as np

from .errors import ManifestMismatchError
from .planning.shares import largest_first

_MAGIC = b"AIRLIST2"
_ALIGN = 64
_CHUNK = 1 << 20


class Paths(SequenceABC):
    """Relative paths, decoded from the listing's blob one at a time (or all at once with `tolist`)."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        self._blob, self._offsets = blob, offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self._blob[self._offsets[i]:self._offsets[i + 1] - 1].tobytes().decode()

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def tolist(self) -> list[str]:
        """Every path as a Python string (one decode and one split: fast, but 10^7 strings cost ~1 GB)."""
        if not len(self):
            return []
        return self._blob[:-1].tobytes().decode().split("\0")

    def take(self, items: Sequence[int]) -> list[str]:
        """The paths of `items`, decoded together: many times faster than one at a time."""
        out: list[str] = []
        for joined, _ in self._joined(items):
            out += joined[:-1].tobytes().decode().split("\0")
        return out

    def lengths(self, items: Sequence[int]) -> np.ndarray:
        """The byte lengths of the paths of `items`, as an array (from the offsets: no path is decoded)."""
        items = np.asarray(items, dtype=np.int64)
        return self._offsets[items + 1] - self._offsets[items] - 1

    def _joined(self, items: Sequence[int]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(the paths of a chunk of `items`, each followed by its NUL, as bytes; their lengths), chunk by chunk.

        In chunks: the gather's index is 8 bytes per byte of path.
        """
        items = np.asarray(items, dtype=np.int64)
        for lo in range(0, len(items), _CHUNK >> 4):
            chunk = items[lo:lo + (_CHUNK >> 4)]
            starts, stops = self._offsets[chunk], self._offsets[chunk + 1]
            with_nul = stops - starts
            at = np.repeat(starts - np.cumsum(with_nul) + with_nul, with_nul) + np.arange(int(with_nul.sum()))
            yield self._blob[at], with_nul - 1

    def endswith(self, suffix: str | tuple[str, ...]) -> np.ndarray:
        """Whether each path ends with the ASCII `suffix` (or one of several), ignoring case: a mask, without
        making any string.

        Several suffixes cost one pass, a byte at a time from the paths' ends, over the paths still ending
        like one of them: in a listing of other files, all but a few leave after a byte or two.
        """
        wanted = [s.lower().encode("ascii") for s in ((suffix,) if isinstance(suffix, str) else suffix)]
        if b"" in wanted:
            return np.ones(len(self), bool)
        longest = max((len(w) for w in wanted), default=0)
        # The bytes some suffix has at each place from the end, and the suffixes that end at each length.
        allowed = [np.frombuffer(bytes({w[-back] for w in wanted if len(w) >= back}), np.uint8)
                   for back in range(1, longest + 1)]
        out = np.zeros(len(self), bool)
        for lo in range(0, len(self), _CHUNK):  # in chunks: a temporary per byte of 10^7 paths would be 80 MB
            starts, ends = self._offsets[lo:lo + _CHUNK + 1][:-1], self._offsets[lo + 1:lo + _CHUNK + 1] - 1
            alive = np.arange(len(starts))
            # Word k holds a path's bytes 8k+1..8k+8 from its end, the last in its lowest byte, lowered.
            tails = [np.zeros(len(alive), np.uint64) for _ in range(-(-longest // 8))]
            for back in range(1, longest + 1):
                at = ends[alive] - back
                byte = _lowered(np.where(at >= starts[alive], self._blob[np.maximum(at, 0)], np.uint8(0)))
                keep = np.isin(byte, allowed[back - 1])
                alive, byte, tails = alive[keep], byte[keep], [t[keep] for t in tails]
                if not len(alive):  # no path of the chunk ends like a suffix: its longer bytes need no look
                    break
                tails[(back - 1) // 8] |= byte.astype(np.uint64) << np.uint64(8 * ((back - 1) % 8))
                for want in (w for w in wanted if len(w) == back):
                    ok = np.ones(len(alive), bool)
                    for k in range(0, back, 8):
                        part = want[max(0, back - k - 8):back - k]  # its bytes k+1..k+8 from the end
                        mask = np.uint64((1 << 8 * len(part)) - 1)
                        ok &= (tails[k // 8] & mask) == np.uint64(int.from_bytes(part, "big"))
                    out[lo + alive[ok]] = True
        return out


def _lowered(byte: np.ndarray) -> np.ndarray:
    """ASCII bytes with their capital letters lowered, the rest as they are."""
    return byte | ((byte >= ord("A")) & (byte <= ord("Z"))).view(np.uint8) << 5


class Manifest:
    """The files under `root`, sorted by relative path.

    Attributes:
        root: the listed folder as a volume path (`/Volumes/c/s/v/dir`).
        paths: paths relative to `root`, `/`-separated, sorted (a lazy sequence of str).
        sizes: sizes in bytes, aligned with `paths` (int64 array).
        mtimes: modification times in nanoseconds, aligned with `paths` (int64 array).
        fingerprint: a digest of the root and of (path, size, mtime) for every
            file; two listings with the same fingerprint plan identically.
        remembered: the most items whose volume rows a listing keeps decoded
            (~240 bytes each; see `volume_rows`).
    """

    remembered: int = 1 << 16

    def __init__(self, root: str, blob: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, mtimes: np.ndarray,
                 fingerprint: str | None = None, largest_first: np.ndarray | None = None) -> None:
        self.root, self.sizes, self.mtimes = root, sizes, mtimes
        self._blob, self._offsets = blob, offsets
        self.paths = Paths(blob, offsets)
        self.fingerprint = fingerprint or _digest(root, blob, offsets, sizes, mtimes)
        # item -> its volume row (see `volume_rows`); None once more were asked for than it keeps
        self._decoded: dict[int, tuple[str, int, int]] | None = {}
        if largest_first is not None:
            self.largest_first = largest_first

    @cached_property
    def largest_first(self) -> np.ndarray:
        """The items largest first, ties by item: what a bytes-balanced plan deals from, every epoch.

        Saved with the listing, so the node's processes share one copy instead
        of each sorting 10^7 sizes.
        """
        return largest_first(self.sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Manifest) and (self.root, self.fingerprint, len(self))
                == (other.root, other.fingerprint, len(other)))

    def __repr__(self) -> str:
        return f"Manifest({self.root!r}, {len(self)} files, fingerprint={self.fingerprint!r})"

    def volume_path(self, i: int) -> str:
        """The volume path of item `i`."""
        return f"{self.root}/{self.paths[i]}"

    @classmethod
    def build(cls, root: str, entries: Iterable[tuple[str, int, int]]) -> "Manifest":
        """Make a manifest from (relative path, size, mtime_ns) triples in any order."""
        return cls.from_rows(root, sorted(entries))

    @classmethod
    def from_columns(cls, root: str, paths: Sequence[str], sizes: np.ndarray, mtimes: np.ndarray) -> "Manifest":
        """Make a manifest from relative paths, sizes and mtimes in any order (fastest in sorted runs)."""
        order = sorted(range(len(paths)), key=paths.__getitem__)
        blob, offsets = _blob_of([paths[i] for i in order])
        index = np.array(order, dtype=np.int64)
        return cls(root, blob, offsets, np.asarray(sizes, np.int64)[index], np.asarray(mtimes, np.int64)[index])

    @classmethod
    def from_rows(cls, root: str, rows: Sequence[tuple[str, int, int]], fingerprint: str | None = None
                  ) -> "Manifest":
        """A manifest of (relative path, size, mtime_ns) rows in the order given.

        `fingerprint`: the listing these rows were taken from (a read task's
        share of it); by default, their own.
        """
        n = len(rows)
        blob, offsets = _blob_of([r[0] for r in rows])
        sizes = np.fromiter((r[1] for r in rows), np.int64, n)
        mtimes = np.fromiter((r[2] for r in rows), np.int64, n)
        return cls(root, blob, offsets, sizes, mtimes, fingerprint)

    def volume_rows(self, items: Sequence[int]) -> list[tuple[str, int, int]]:
        """(volume path, size, mtime_ns) of `items`, decoded together, and remembered for up to `remembered`.

        Each epoch passes over the same items again: remembered, their rows
        are not decoded again, and each path is the same string every time,
        whose hash Python keeps, so lookups keyed by it cost less too (in a
        DataLoader worker, which wakes for each pass with cold caches, the
        decode alone cost ~1.3 µs a file). A process that asks for more
        items than that (a share of 10^7 files) remembers none: its passes
        decode as they go, and hold no rows.
        """
        memo = self._decoded
        if memo is not None:
            try:
                return [memo[i] for i in items]
            except KeyError:
                pass
        at = np.asarray(items, dtype=np.int64)
        rows = list(zip(map(f"{self.root}/".__add__, self.paths.take(at)), self.sizes[at].tolist(),
                        self.mtimes[at].tolist()))
        if memo is not None:
            if len(memo) + len(rows) > self.remembered:  # passes too long to come back remembered: keep none
                self._decoded = None
            else:
                memo.update(zip(at.tolist(), rows))
        return rows

    def subset(self, items: Sequence[int]) -> "Manifest":
        """The listing of `items` alone, in the order given, under this listing's fingerprint (a read task's
        share of it): its arrays gathered, no Python object made per file (10^6 files' rows as tuples, and
        the paths made from them, cost `get_read_tasks` 0.3-0.4 s more, much of it the collector's passes)."""
        items = np.asarray(items, dtype=np.int64)
        joined = list(self.paths._joined(items))
        blob = np.concatenate([b for b, _ in joined]) if joined else np.zeros(0, np.uint8)
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        if joined:
            np.cumsum(np.concatenate([n for _, n in joined]) + 1, out=offsets[1:])
        return Manifest(self.root, blob, offsets, self.sizes[items], self.mtimes[items], self.fingerprint)

    def rows(self, items: Sequence[int]) -> list[tuple[str, int, int]]:
        """(relative path, size, mtime_ns) of `items`, for a `from_rows` of part of the listing."""
        items = np.asarray(items, dtype=np.int64)
        return list(zip(self.paths.take(items), self.sizes[items].tolist(), self.mtimes[items].tolist()))

    def save(self, file: str) -> None:
        """Write the manifest to `file` atomically: a header, then its arrays, each aligned for mapping."""
        header = json.dumps({"root": self.root, "fingerprint": self.fingerprint, "files": len(self),
                             "blob": int(self._blob.nbytes)}).encode()
        tmp = f"{file}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + len(header).to_bytes(8, "little") + header)
            for array in (self._offsets, self.sizes, self.mtimes, self.largest_first, self._blob):
                f.write(b"\0" * (-f.tell() % _ALIGN))
                f.write(np.ascontiguousarray(array).data)
        os.replace(tmp, file)

    @classmethod
    def load(cls, file: str) -> "Manifest":
        """Map a manifest written by `save`: its pages are shared by every process that maps the file."""
        with open(file, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return cls.from_buffer(mapped, file)

    @classmethod
    def from_buffer(cls, mapped, name: str) -> "Manifest":
        """A manifest written by `save`, from its bytes (a mapped file, or bytes read); its arrays are views of
        them. `name`: where they came from, for errors."""
        if mapped[:len(_MAGIC)] != _MAGIC:
            raise ManifestMismatchError(f"{name} is not a listing saved by this version; delete it to list again")
        length = int.from_bytes(mapped[8:16], "little")
        head = json.loads(mapped[16:16 + length])
        n, at = head["files"], 16 + length
        arrays = []
        for dtype, count in ((np.int64, n + 1), (np.int64, n), (np.int64, n), (np.int64, n), (np.uint8, head["blob"])):
            at += -at % _ALIGN
            arrays.append(np.frombuffer(mapped, dtype=dtype, count=count, offset=at))
            at += arrays[-1].nbytes
        offsets, sizes, mtimes, by_size, blob = arrays
        return cls(head["root"], blob, offsets, sizes, mtimes, head["fingerprint"], by_size)

    def __reduce__(self):
        return Manifest, (self.root, self._blob, self._offsets, self.sizes, self.mtimes, self.fingerprint)


def save_listing(manifest: Manifest, folder: str) -> str:
    """The listing's file in `folder`, named for its fingerprint (written once)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    file = os.path.join(folder, f"{manifest.fingerprint}.listing")
    if not os.path.exists(file):
        manifest.save(file)
    return file


def load_listing(file: str, fingerprint: str) -> Manifest | None:
    """The listing saved in `file` if it is there, readable and of `fingerprint`; else None."""
    try:
        m = Manifest.load(file)
    except (OSError, ManifestMismatchError, ValueError):
        return None
    return m if m.fingerprint == fingerprint else None


def _blob_of(paths: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(blob, offsets) of `paths` in this order: each path's UTF-8 bytes and a NUL, and where each begins."""
    blob = np.frombuffer(("\0".join(paths) + "\0").encode() if paths else b"", dtype=np.uint8)
    offsets = np.zeros(len(paths) + 1, dtype=np.int64)
    offsets[1:] = np.flatnonzero(blob == 0) + 1  # a path never holds NUL
    return blob, offsets


def _digest(root: str, blob: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, mtimes: np.ndarray) -> str:
    digest = hashlib.sha256(f"{root}\n".encode())  # a copy elsewhere is another listing
    for array in (offsets, sizes, mtimes, blob):
        digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()[:32]


__all__ = ["Manifest", "Paths", "load_listing", "save_listing"]
