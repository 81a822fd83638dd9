"""The node-local cache: one per machine, shared by every process, kept across runs.

Entries are keyed by (volume path, size, mtime), so a changed file is fetched
again. An entry may hold one byte range of a file instead (a `span`, keyed
too): a pack's reader caches the row groups its node reads, not whole shards.
A range entry is fetched, published, counted and pruned as a file is.

A fetch copies into `<entry>.part` while holding an exclusive `flock`
on it, then links it to the entry's name: a process killed mid-copy leaves
only a `.part` file, never served, whose lock dies with the process so the
next fetcher takes over. Concurrent fetchers of one file wait on that lock and
then find the entry, so each file crosses the network once per node.

A request for a file this process is already fetching is a hedge of a stuck
read (see `air_core.fetch.ordered_map`): it must not wait on that lock, so it
copies into an unnamed file of its own (`O_TMPFILE`: a killed process leaves
nothing) and links it in. Publishing is a link, which never replaces a name:
the first complete copy wins, the other is dropped uncounted.

Admission, not eviction, keeps the cache within its byte cap and the disk's
free reserve: once full, new files are not admitted (they are streamed from
the volume instead). Under epochs that cycle over more data than fits, LRU
eviction would drive the hit rate to zero; freezing keeps it at cap/data.
`prune` removes entries unused for a while, and the least recently used ones
when the cache is over its cap (a lowered cap, old datasets), sparing entries
used in the last hour; `clear` removes everything; `info` says what is held.
`air-data cache info|prune|clear` runs them. None of them keeps a structure
per entry in memory: at 10^7 entries the cache is surveyed into two arrays.

The data is governed: the folder is 0700 and every file 0600.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import tempfile
import threading
import time
from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

import numpy as np

from .errors import FetchError, OptionError
from .fetch import ordered_map

CACHE_DIR_ENV = "AIR_CACHE_DIR"
IN_USE_SECONDS = 3600
_CHUNK = 1 << 20
_RANGE = 16 << 20
_RANGE_FROM = 2 * _RANGE
_RANGE_THREADS = 8
_RANGE_HEDGE_FLOOR_S = 1.0  # a range is 16 MiB: 0.1-0.3 s from object storage; hedging one re-reads all of it
_RECHECK_BYTES = 64 << 20
_ATIME_REFRESH_NS = 60 * 10**9
_KEY_CHARS, _NAME_CHARS = 40, 96

Span = tuple[int, int]  # [start, stop) bytes of a file


def default_dir() -> str:
    """`$AIR_CACHE_DIR`, else `/local_disk0/air-cache` on Databricks, else a per-user temp folder."""
    if os.environ.get(CACHE_DIR_ENV):
        return os.environ[CACHE_DIR_ENV]
    if os.path.isdir("/local_disk0") and os.access("/local_disk0", os.W_OK):
        return f"/local_disk0/air-cache-{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), f"air-cache-{os.getuid()}")


def entry_path_length(root: str, name_length: int | np.ndarray) -> int | np.ndarray:
    """The length of a cached copy's path, in the cache at `root`, for a file name of `name_length` characters.

    For size estimates over many files (an array of lengths gives an array): no hashing, unlike `Cache.entry_path`.
    """
    return len(os.path.abspath(root)) + len("/objects/xx/-") + _KEY_CHARS + np.minimum(name_length, _NAME_CHARS)


@dataclass
class CacheStats:
    """Counters of one process's use of the cache."""

    hits: int = 0
    misses: int = 0
    bytes_fetched: int = 0
    not_admitted: int = 0
    hedged: int = 0  # second requests for a file whose first was slow (each one extra read)


class Cache:
    """A node-local file cache under `root`.

    Args:
        root: the cache folder (default: `default_dir()`).
        limit_bytes: cap on the bytes held; None for no cap.
        reserve_bytes: free space to leave on the disk (default: 10% of it).
    """

    def __init__(self, root: str | None = None, *, limit_bytes: int | None = None,
                 reserve_bytes: int | None = None) -> None:
        self.root = os.path.abspath(root or default_dir())
        if limit_bytes is not None and limit_bytes < 0:
            raise OptionError(f"cache_limit={limit_bytes}: give a number of bytes >= 0, or None for no cap")
        self.limit_bytes = limit_bytes
        self._objects = os.path.join(self.root, "objects")
        self._ensure_private(self.root)
        os.makedirs(self._objects, mode=0o700, exist_ok=True)
        if len(os.listdir(self._objects)) < 256:  # made once, so a fetch never needs a mkdir
            for k in range(256):
                os.makedirs(os.path.join(self._objects, f"{k:02x}"), mode=0o700, exist_ok=True)
        if reserve_bytes is None:
            reserve_bytes = shutil.disk_usage(self.root).total // 10
        self.reserve_bytes = reserve_bytes
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._free: int | None = None
        self._fetching: set[str] = set()  # entries this process is copying now
        self._unchecked = 0
        self._usage_file = os.path.join(self.root, "usage")
        if limit_bytes is not None and self.usage() > limit_bytes:
            self.prune()

    @staticmethod
    def _ensure_private(root: str) -> None:
        os.makedirs(root, mode=0o700, exist_ok=True)
        st = os.stat(root)
        if st.st_uid != os.getuid():
            raise OptionError(
                f"cache folder {root} belongs to another user (uid {st.st_uid}); it holds governed "
                f"data, so set {CACHE_DIR_ENV} to a folder of your own"
            )
        if st.st_mode & 0o077:
            os.chmod(root, 0o700)

    def entry_path(self, volume_path: str, size: int, mtime_ns: int, span: Span | None = None) -> str:
        """Where the copy of this version of the file (or of its bytes `span`) lives, whether or not it is there yet."""
        return _entry_path(self._objects, volume_path, size, mtime_ns, span)

    def lookup(self, volume_path: str, size: int, mtime_ns: int, span: Span | None = None) -> str | None:
        """The cached copy's path if this version of the file (or of its bytes `span`) is cached, else None."""
        entry = self.entry_path(volume_path, size, mtime_ns, span)
        if self._touch(entry):
            with self._lock:  # every later epoch asks once per file: no keyword loop here
                self.stats.hits += 1
            return entry
        return None

    def get(self, source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None = None) -> str | None:
        """The cached copy's path, fetching `source` first if needed; None if not admitted.

        `span`: cache only the bytes [start, stop) of the file, as an entry of
        their own (its byte `k` is the file's byte `start + k`); `size` and
        `mtime_ns` are still the whole file's, which the copy checks.
        A call for a file this process is fetching already is a hedge: it makes
        a copy of its own rather than wait for the first.
        """
        hit = self.lookup(volume_path, size, mtime_ns, span)
        if hit is not None:
            return hit
        entry = self.entry_path(volume_path, size, mtime_ns, span)
        with self._lock:
            hedge = entry in self._fetching
            self._fetching.add(entry)
            self.stats.hedged += hedge
        if hedge:
            return self._hedge(source, volume_path, size, mtime_ns, span, entry)
        try:
            return self._fetch(source, volume_path, size, mtime_ns, span, entry)
        finally:
            with self._lock:
                self._fetching.discard(entry)

    def _fetch(self, source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None,
               entry: str) -> str | None:
        part = os.path.join(os.path.dirname(entry), "." + os.path.basename(entry) + ".part")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # another fetcher of this file finishes first
            if self._touch(entry):
                _unlink_if_same(part, fd)
                self._count(hits=1)
                return entry
            length = _length(size, span)
            if not self._reserve(length):  # the empty .part stays: a waiter may still fill it
                self._count(not_admitted=1)
                return None
            try:
                # A stale .part of this key holds at most `length` bytes (size and span are in the
                # key), so writing `length` bytes from offset 0 leaves exactly the entry.
                copy_into(source, volume_path, size, mtime_ns, fd, span)
                won = _publish(part, entry)
            except BaseException:
                self._reserve(-length)
                raise
            _unlink_if_same(part, fd)
            self._settle(won, length)
            return entry
        finally:
            os.close(fd)

    def _hedge(self, source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None,
               entry: str) -> str | None:
        length = _length(size, span)
        if not self._reserve(length):
            self._count(not_admitted=1)
            return None
        fd, name = _private_file(os.path.dirname(entry), os.path.basename(entry))
        try:
            copy_into(source, volume_path, size, mtime_ns, fd, span)
            won = _publish(name or f"/proc/self/fd/{fd}", entry)
        except BaseException:
            self._reserve(-length)
            raise
        finally:
            os.close(fd)
            if name:
                _unlink(name)
        self._settle(won, length)
        return entry

    def _settle(self, won: bool, size: int) -> None:
        """Count a copy that became the entry; give back the room of one that came second."""
        if won:
            self._count(misses=1, bytes_fetched=size)
        else:
            self._reserve(-size)

    def usage(self) -> int:
        """Bytes held, as recorded in the shared ledger (scanned when there is none)."""
        with self._ledger() as (read, _):
            return read()

    def prune(self, older_than: float | None = None) -> int:
        """Remove entries unused for `older_than` seconds, then least recently used ones down to the cap.

        Entries used in the last `IN_USE_SECONDS` stay either way: a reader
        may hold their path. Returns the bytes freed. Two passes over the
        entries with their times and sizes in arrays, so a cache of 10^7
        files is pruned in a few hundred MB of memory.
        """
        now = time.time()
        atimes, sizes = self._survey()
        cut = -np.inf if older_than is None else now - older_than
        total = int(sizes.sum())
        if self.limit_bytes is not None and total > self.limit_bytes:
            order = np.argsort(atimes, kind="stable")
            k = int(np.searchsorted(np.cumsum(sizes[order]), total - self.limit_bytes))
            cut = max(cut, float(atimes[order[min(k, len(order) - 1)]]))
        cut = min(cut, now - IN_USE_SECONDS)
        freed = 0
        for entry in self._entries():
            st = entry.stat(follow_symlinks=False)
            if st.st_atime <= cut:
                _unlink(entry.path)
                freed += st.st_size
        with self._ledger() as (_, write):
            write(total - freed)
        return freed

    def clear(self) -> int:
        """Remove every entry and saved listing, in use or not; returns the bytes freed.

        Paths that running jobs were handed stop existing: stop them first.
        """
        freed = 0
        for entry in self._entries():
            freed += entry.stat(follow_symlinks=False).st_size
            _unlink(entry.path)
        shutil.rmtree(os.path.join(self.root, "manifests"), ignore_errors=True)
        with self._ledger() as (_, write):
            write(0)
        return freed

    def info(self) -> dict:
        """The cache's folder, bytes and entries held (counted now), cap, and the disk's free bytes."""
        atimes, sizes = self._survey()
        return {"folder": self.root, "bytes": int(sizes.sum()), "entries": len(sizes),
                "limit_bytes": self.limit_bytes, "disk_free_bytes": shutil.disk_usage(self.root).free,
                "oldest_use": float(atimes.min()) if len(atimes) else None}

    def _entries(self) -> Iterator[os.DirEntry]:
        """Every published entry (not the hidden copies in progress), folder by folder."""
        for k in range(256):
            with os.scandir(os.path.join(self._objects, f"{k:02x}")) as it:
                yield from (e for e in it if not e.name.startswith(".") and e.is_file(follow_symlinks=False))

    def _survey(self) -> tuple[np.ndarray, np.ndarray]:
        """(last use, size) of every entry, as float64 and int64 arrays."""
        atimes, sizes = array("d"), array("q")
        for e in self._entries():
            st = e.stat(follow_symlinks=False)
            atimes.append(st.st_atime)
            sizes.append(st.st_size)
        return np.frombuffer(atimes, dtype=np.float64), np.frombuffer(sizes, dtype=np.int64)

    def _touch(self, entry: str) -> bool:
        try:
            st = os.stat(entry)
        except FileNotFoundError:
            return False
        now = time.time_ns()
        if now - st.st_atime_ns > _ATIME_REFRESH_NS:  # atime drives prune's LRU; a minute is fine enough
            os.utime(entry, ns=(now, st.st_mtime_ns))
        return True

    def _reserve(self, nbytes: int) -> bool:
        """Add `nbytes` to the ledger if they fit under the cap and the free-disk reserve."""
        if nbytes > 0 and not self._disk_has_room(nbytes):
            return False
        if self.limit_bytes is None:
            return True
        with self._ledger() as (read, write):
            used = read()
            if nbytes > 0 and used + nbytes > self.limit_bytes:
                return False
            write(max(0, used + nbytes))
        return True

    def _disk_has_room(self, nbytes: int) -> bool:
        """Free space minus `nbytes` stays above the reserve; the disk is asked every 64 MiB."""
        with self._lock:
            if self._free is None or self._unchecked + nbytes > _RECHECK_BYTES:
                self._free, self._unchecked = shutil.disk_usage(self.root).free, 0
            if self._free - self._unchecked - nbytes < self.reserve_bytes:
                return False
            self._unchecked += nbytes
            return True

    def _ledger(self):
        cache = self

        class Ledger:
            def __enter__(self):
                self.fd = os.open(cache._usage_file, os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                return self.read, self.write

            def read(self) -> int:
                raw = os.pread(self.fd, 64, 0)
                return int(raw) if raw.strip() else cache._scan()

            def write(self, n: int) -> None:
                os.ftruncate(self.fd, 0)
                os.pwrite(self.fd, str(n).encode(), 0)

            def __exit__(self, *exc):
                os.close(self.fd)

        return Ledger()

    def _scan(self) -> int:
        return int(self._survey()[1].sum())

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)


@lru_cache(maxsize=1 << 16)
def _entry_path(objects: str, volume_path: str, size: int, mtime_ns: int, span: Span | None) -> str:
    # Every later epoch asks again, so answers are remembered; boundedly: a stream of 10^7 files must
    # not hold a dict of them all (once past the bound, a cyclic pass just hashes again, ~1 us a file).
    ranged = "" if span is None else f"\0{span[0]}\0{span[1]}"
    key = hashlib.sha256(f"{volume_path}\0{size}\0{mtime_ns}{ranged}".encode()).hexdigest()[:_KEY_CHARS]
    at = "" if span is None else f"{span[0]}-{span[1]}-"  # readable in a listing of the cache
    return f"{objects}/{key[:2]}/{key}-{at}{volume_path.rsplit('/', 1)[-1][-_NAME_CHARS:]}"


def _length(size: int, span: Span | None) -> int:
    return size if span is None else span[1] - span[0]


def copy_into(source: str, volume_path: str, size: int, mtime_ns: int, fd: int, span: Span | None = None) -> None:
    """Copy `source` (or its bytes `span`) into the open file `fd` from offset 0, checking it is the listed version.

    A volume's bandwidth is per open file, so a copy over `_RANGE_FROM` bytes is
    made of `_RANGE`-byte ranges, up to `_RANGE_THREADS` at once, each through
    its own open: a single large file (a Parquet export) then arrives several
    times faster than one stream allows. A range far slower than the others is
    hedged (`ordered_map`); the copy that loses stops at its next chunk, and
    writes the same bytes through a descriptor of its own until then, so
    returning late it cannot write into whatever file reuses `fd`'s number.
    A smaller copy goes through `sendfile`,
    inside the kernel: no Python buffer, and few system calls, each of which
    hands the GIL over; file systems that refuse it get pread/pwrite.
    """
    begin, end = (0, size) if span is None else span
    if not 0 <= begin <= end <= size:
        raise OptionError(f"bytes {begin}-{end} of {volume_path}, which holds {size}: not a range of it")
    if end - begin > _RANGE_FROM:
        bounds = [(start, min(start + _RANGE, end)) for start in range(begin, end, _RANGE)]
        done = threading.Event()
        try:
            copied = sum(ordered_map(lambda b: _copy_range(source, volume_path, size, mtime_ns, fd, *b, begin, done),
                                     ((b, 0) for b in bounds), threads=_RANGE_THREADS, max_ahead=len(bounds),
                                     max_bytes=1, hedge_floor=_RANGE_HEDGE_FLOOR_S))
        finally:
            done.set()
    else:
        src = _open_version(source, volume_path, size, mtime_ns)
        try:
            try:
                copied = _sendfile(src, fd, begin, end)
            except OSError as e:
                if e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                copied = _pread_pwrite(src, fd, begin, end, begin)
        finally:
            os.close(src)
    if copied != end - begin:
        raise FetchError(0, f"{volume_path} changed while being read ({copied} of {end - begin} bytes)")


def _open_version(source: str, volume_path: str, size: int, mtime_ns: int) -> int:
    src = os.open(source, os.O_RDONLY)
    try:
        _check_version(os.fstat(src), volume_path, size, mtime_ns)
    except BaseException:
        os.close(src)
        raise
    return src


def _copy_range(source: str, volume_path: str, size: int, mtime_ns: int, dst: int, start: int, stop: int,
                base: int, done: threading.Event) -> int:
    src = _open_version(source, volume_path, size, mtime_ns)
    try:
        own = os.dup(dst)
        try:
            return _pread_pwrite(src, own, start, stop, base, done)
        finally:
            os.close(own)
    finally:
        os.close(src)


def _sendfile(src: int, dst: int, start: int, stop: int) -> int:
    """Copy bytes [start, stop) of `src` to `dst`'s position (a new file's start): the kernel's copy."""
    copied, size = 0, stop - start
    while copied < size:
        n = os.sendfile(dst, src, start + copied, size - copied)
        if not n:
            break
        copied += n
    return copied


def _pread_pwrite(src: int, dst: int, start: int, stop: int, base: int = 0,
                  done: threading.Event | None = None) -> int:
    """Copy bytes [start, stop) of `src` to `base` bytes earlier in `dst`, until `done`.

    Positional reads and writes: threads may share `dst`.
    """
    at = start
    while at < stop and not (done and done.is_set()):
        chunk = os.pread(src, min(stop - at, _CHUNK), at)
        if not chunk:
            break
        os.pwrite(dst, chunk, at - base)
        at += len(chunk)
    return at - start


def read_bytes(source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None = None) -> bytes:
    """Read `source` whole (or its bytes `span`) into memory, checking it is the listed version."""
    begin, end = (0, size) if span is None else span
    fd = _open_version(source, volume_path, size, mtime_ns)
    try:
        if begin:
            os.lseek(fd, begin, os.SEEK_SET)
        data = read_fd(fd, end - begin)
    finally:
        os.close(fd)
    if len(data) != end - begin:
        raise FetchError(0, f"{volume_path} changed while being read ({len(data)} of {end - begin} bytes)")
    return data


def read_fd(fd: int, size: int) -> bytes:
    """Read up to `size` bytes from `fd` in as few calls as the kernel allows."""
    data = os.read(fd, size)
    if len(data) < size and data:
        parts, n = [data], len(data)
        while n < size and (chunk := os.read(fd, size - n)):
            parts.append(chunk)
            n += len(chunk)
        data = b"".join(parts)
    return data


def _check_version(st: os.stat_result, volume_path: str, size: int, mtime_ns: int) -> None:
    if st.st_size != size or st.st_mtime_ns != mtime_ns:
        raise FetchError(
            0, f"{volume_path} changed after it was listed (size {size} -> {st.st_size}); "
            "list again (make a new stream) to read the new version"
        )


def _private_file(folder: str, name: str) -> tuple[int, str | None]:
    """A new 0600 file for writing in `folder`: unnamed where the file system allows, else hidden."""
    try:
        return os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o600), None
    except (AttributeError, OSError):  # no O_TMPFILE on this OS or file system
        fd, path = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".hedge")
        return fd, path


def _publish(copy: str, entry: str) -> bool:
    """Give the complete `copy` the entry's name unless a copy already has it; True if this one did.

    A link, not a rename: a rename would replace the entry another fetcher just
    published (and that readers may hold), and count the file twice.
    """
    folder = os.open(os.path.dirname(entry), os.O_RDONLY | os.O_DIRECTORY)
    try:  # with a folder descriptor, os.link is linkat(AT_SYMLINK_FOLLOW): `copy` may be /proc/self/fd/N
        os.link(copy, os.path.basename(entry), dst_dir_fd=folder, follow_symlinks=True)
    except FileExistsError:
        return False
    finally:
        os.close(folder)
    return True


def _unlink_if_same(path: str, fd: int) -> None:
    """Remove `path` if it is still the file open as `fd` (whose lock we hold)."""
    try:
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
