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
read (see `air_core.io.fetch.ordered_map`): it must not wait on that lock, so it
copies into an unnamed file of its own (`O_TMPFILE`: a killed process leaves
nothing) and links it in. Publishing is a link, which never replaces a name:
the first complete copy wins, the other is dropped uncounted.

Admission, not eviction, keeps the cache within its byte cap and the disk's
free reserve: once full, new files are not admitted (they are streamed from
the volume instead). Under epochs that cycle over more data than fits, LRU
eviction would drive the hit rate to zero; freezing keeps it at cap/data.
The cap is the node cache's, not a handle's: every handle on the node, capped
or not, reserves a copy's bytes in one ledger before copying, and one made
without a cap (a reader inside the library) keeps to the cap the last capped
handle recorded there (`air_core.io.cache_ledger`: reservations of killed
processes given back, the count after a reboot made without the ledger's
lock). A hit never reads the ledger.
`prune` removes entries unused for a while, and the least recently used ones
when the cache is over its cap (a lowered cap, old datasets), sparing entries
used in the last hour; `clear` removes everything; `info` says what is held.
`air-data cache info|prune|clear|verify` runs them. None of them keeps a structure
per entry in memory: at 10^7 entries the cache is surveyed into two arrays.

A copy must be sound before it is served: the cache survives restarts, and a
machine crash (a link without `fsync`), a full disk or a person can leave an
entry short or empty. Every hit compares the entry's length, from the `stat`
the lookup makes anyway, with the length its key promises; with `verify` it
also hashes the entry's bytes against the checksum recorded when they were
copied. A copy that fails is removed, logged in `damaged` (for `info`), and
fetched again; the reader never sees it. `check` does the same for every
entry (`air-data cache verify`).

The checksum, xxh3-64 of each 16 MiB block of the copy, is taken by a cache
opened with `verify`, from the bytes as they are copied (no second pass), and
stored with its length in an extended attribute of the copy, set before it is
published: the entry and its checksum appear in one step, and a crash cannot
leave one without the other. Without `verify` a copy is made by `sendfile`,
inside the kernel, and records none (a cold pass costs a third less CPU per
small file); a `verify` hit on such a copy fetches it again, with one.

What a crash leaves is repaired by the cache itself: a damaged entry on its
next hit; a `.part` file by the next fetch of its file, or by `prune` (one
whose lock is free is no copy in progress); the ledger, kept with the boot it
was written in, is counted again from the disk when it is torn or older than
the last boot, and by `prune`; a killed process's reservations are given back
once its lock is free.

A process forked from one that used a handle (a DataLoader worker) can use
it: the handle's locks, fetches in flight and counters are made anew in the
child, and the child holds none of the file locks its parent's threads held
(`air_core.io.node_lock.lock_file`).

The data is governed: the folder is 0700 and every file 0600.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from array import array
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

import numpy as np
import xxhash

from .. import options
from ..errors import FetchError, OptionError
from . import transport
from .cache_ledger import Ledger
from .fetch import ordered_map
from .held_open import held_open, open_version
from .kernel_copy import send_range
from .node_lock import lock_file, unlock_file

if TYPE_CHECKING:
    from .files_api import FilesApi

log = logging.getLogger("air_core")

CACHE_DIR_ENV = "AIR_CACHE_DIR"
IN_USE_SECONDS = 3600
_COPY_CHUNK = 256 << 10  # per fetch thread: 64 threads hold 16 MiB
_buffers = threading.local()
_RANGE = 16 << 20
_RANGE_FROM = 2 * _RANGE
_RANGE_THREADS = 8
_RANGE_HEDGE_FLOOR_S = 1.0  # a range is 16 MiB: 0.1-0.3 s from object storage; hedging one re-reads all of it
_RECHECK_BYTES = 64 << 20
_ATIME_REFRESH_NS = 60 * 10**9
# A whole file's entry is named by the hash of its key: the first hex digit is its folder (one of 16), the next
# 31 its name. A name that short is kept inside the kernel's directory entry (32 bytes before Linux 6.14, 40
# since), and 16 folders stay in the CPU's caches: a warm `stat` of a copy cost 0.5-0.7 us less than under 256
# folders of names of 54 characters (the layout before, measured in a DataLoader worker's pass, each copy read
# between).
_SHARDS, _NAME_CHARS = 16, 31
_CHECKSUM_ATTR = "user.air.xxh3"  # b"<length> <hex digest>"; see `_digest`
_ABSENT = "absent"
_UNCHECKED = "has no checksum to check its bytes against"  # copied without `verify`: fetched again, with one

Span = tuple[int, int]  # [start, stop) bytes of a file


def default_dir() -> str:
    """`$AIR_CACHE_DIR`, else `/local_disk0/air-cache` on Databricks, else a per-user temp folder."""
    if os.environ.get(CACHE_DIR_ENV):
        return os.environ[CACHE_DIR_ENV]
    if os.path.isdir("/local_disk0") and os.access("/local_disk0", os.W_OK):
        return f"/local_disk0/air-cache-{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), f"air-cache-{os.getuid()}")


def entry_path_length(root: str) -> int:
    """The length of a cached copy's path in the cache at `root` (every whole file's is as long): for size estimates
    over many files, with no hashing, unlike `Cache.entry_path`."""
    return len(os.path.abspath(root)) + len("/objects/x/") + _NAME_CHARS


@dataclass
class CacheStats:
    """Counters of one process's use of the cache."""

    hits: int = 0
    misses: int = 0
    bytes_fetched: int = 0
    not_admitted: int = 0
    hedged: int = 0  # second requests for a file whose first was slow (each one extra read)
    damaged: int = 0  # copies that failed their check on a hit: removed, and fetched again


@dataclass
class CheckReport:
    """What `Cache.check` found.

    Attributes:
        entries: entries looked at.
        bytes: bytes they hold.
        damaged: paths of the entries whose length or bytes differ from those recorded when they were copied.
        unchecked: entries with no checksum recorded (copied without `verify`, by an older version, or
            on a file system without extended attributes): only a hit's length check applies to them.
        repaired: whether the damaged entries were removed.
    """

    entries: int = 0
    bytes: int = 0
    damaged: list[str] = field(default_factory=list)
    unchecked: int = 0
    repaired: bool = False


class Cache:
    """A node-local file cache under `root`.

    Args:
        root: the cache folder (default: `default_dir()`).
        limit_bytes: cap on the bytes the node's cache holds, recorded there
            whenever this handle asks to admit a copy; None: keep to the cap the last
            capped handle recorded, if any.
        reserve_bytes: free space to leave on the disk (default: 10% of it).
        verify: on every hit, hash the copy's bytes against the checksum
            recorded when it was copied, not only its length (costs a read of
            the copy per hit; see the README). Needs a file system that keeps
            extended attributes.
    """

    def __init__(self, root: str | None = None, *, limit_bytes: int | None = None,
                 reserve_bytes: int | None = None, verify: bool = False) -> None:
        self.root = os.path.abspath(root or default_dir())
        if limit_bytes is not None and limit_bytes < 0:
            raise OptionError(f"cache_limit={limit_bytes}: give a number of bytes >= 0, or None to keep to the node "
                              "cache's cap")
        options.flag("verify", verify)
        self.limit_bytes = limit_bytes
        self.verify = verify
        self._objects = os.path.join(self.root, "objects")
        self._ensure_private(self.root)
        os.makedirs(self._objects, mode=0o700, exist_ok=True)
        held = set(os.listdir(self._objects))
        for shard in (f"{k:x}" for k in range(_SHARDS)):  # made once, so a fetch never needs a mkdir
            if shard not in held:
                os.makedirs(os.path.join(self._objects, shard), mode=0o700, exist_ok=True)
        # Copies an earlier layout left (see `_adopt`): only then does a miss look for one.
        self._earlier = any(len(name) == 2 for name in held)
        # A warm epoch's `stat` of each copy is relative to this descriptor: the kernel then walks two
        # names, not the cache folder's whole path (a hit 2.2 -> 1.9 us, measured under /dev/shm).
        self._objects_fd = os.open(self._objects, os.O_RDONLY | os.O_DIRECTORY)
        weakref.finalize(self, os.close, self._objects_fd)
        if reserve_bytes is None:
            reserve_bytes = shutil.disk_usage(self.root).total // 10
        self.reserve_bytes = reserve_bytes
        self._start()
        _handles.add(self)
        objects = self._objects  # the count holds no reference to the handle: a handle goes with its last user
        self._ledger = Ledger(self.root, lambda: int(_survey(objects)[1].sum()))
        self._damage_log = os.path.join(self.root, "damaged")
        if verify:
            _require_attributes(os.path.join(self.root, "usage"))
        if limit_bytes is not None and self.usage() > limit_bytes:
            self.prune()

    def _start(self) -> None:
        """The handle's state in this process: made anew in a process forked from one that used it, whose
        threads (and the fetches, locks and counts they held) do not exist there."""
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._free: int | None = None
        self._unchecked = 0
        self._fetching: set[str] = set()  # entries this process is copying now

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
        """The cached copy's path if this version of the file (or of its bytes `span`) is cached and sound, else None.

        A copy is sound when it holds as many bytes as the key promises (and,
        with `verify`, the bytes its checksum was recorded from). One that is
        not is left for `get` to replace.
        """
        entry = _entry_path(self._objects, volume_path, size, mtime_ns, span)
        if self._fault(entry, size if span is None else span[1] - span[0]) is None:
            with self._lock:  # every later epoch asks once per file: no keyword loop here
                self.stats.hits += 1
            return entry
        return None

    def lookup_run(self, keys: Iterable[tuple[str, int, int]]) -> list[str]:
        """`lookup` of whole files `(volume_path, size, mtime_ns)` in order, up to the first that has no sound copy.

        One call and one count for a run of hits: a warm epoch asks this for
        every file, so the per-file work is only the key's path and the `stat`
        that checks its length. The files from the first miss on are left to
        the caller, unlooked-at.
        """
        objects, found, stat, at = self._objects, [], os.stat, self._objects_fd
        # A copy used since `fresh` needs no atime refresh; under `verify` every copy gets the whole check.
        fresh = time.time_ns() - _ATIME_REFRESH_NS if not self.verify else 1 << 62
        for v, size, t in keys:
            entry, name = _entry_paths(objects, v, size, t, None)
            try:
                st = stat(name, dir_fd=at)
            except FileNotFoundError:
                break
            # The sound, recently used copy of a warm epoch passes here; any other gets the whole check.
            if (st.st_size != size or st.st_atime_ns < fresh) and self._fault(entry, size) is not None:
                break
            found.append(entry)
        with self._lock:
            self.stats.hits += len(found)
        return found

    def get(self, source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None = None, *,
            opened: int | None = None) -> str | None:
        """The cached copy's path, fetching `source` first if needed; None if not admitted.

        `span`: cache only the bytes [start, stop) of the file, as an entry of
        their own (its byte `k` is the file's byte `start + k`); `size` and
        `mtime_ns` are still the whole file's, which the copy checks.
        A call for a file this process is fetching already is a hedge: it makes
        a copy of its own rather than wait for the first. A copy that fails
        its check (see `lookup`) is removed and fetched again. `opened`: a
        descriptor of `source` open already (see `get_spans`), read from
        rather than opening it again.
        """
        return self.lookup(volume_path, size, mtime_ns, span) or self.fetch(source, volume_path, size, mtime_ns, span,
                                                                             opened=opened)

    def fetch(self, source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None = None, *,
              opened: int | None = None) -> str | None:
        """`get` for a caller whose `lookup` just missed: no second lookup (a `stat`) before the entry's lock is
        taken, under which whether a sound copy has appeared meanwhile is checked anyway."""
        entry = self.entry_path(volume_path, size, mtime_ns, span)
        with self._lock:
            hedge = entry in self._fetching
            self._fetching.add(entry)
            self.stats.hedged += hedge
        if hedge:
            return self._hedge(source, volume_path, size, mtime_ns, span, entry, opened)
        try:
            return self._fetch(source, volume_path, size, mtime_ns, span, entry, opened)
        finally:
            with self._lock:
                self._fetching.discard(entry)

    def get_spans(self, source: str, volume_path: str, size: int, mtime_ns: int, spans: Sequence[Span]
                  ) -> list[str | None]:
        """`get` of each of `spans`, small ranges of one file, those not cached fetched through one descriptor of it
        held open for the next call (`held_open`): a volume's open costs a round trip, and the chunks of a column
        across a file's row groups are many small spans. Over the Files API, where each range is a request of its
        own, each is `get` alone."""
        found = [self.lookup(volume_path, size, mtime_ns, span) for span in spans]
        if all(entry is not None for entry in found) or transport.remote(source) is not None:
            return [entry or self.get(source, volume_path, size, mtime_ns, span) for entry, span in zip(found, spans)]
        with held_open(source, volume_path, size, mtime_ns) as src:
            return [entry or self.get(source, volume_path, size, mtime_ns, span, opened=src)
                    for entry, span in zip(found, spans)]

    def _fetch(self, source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None,
               entry: str, opened: int | None) -> str | None:
        length = _length(size, span)
        with _claimed(entry) as (fd, part):
            fault = self._fault(entry, length)  # another fetcher of this file may have finished first
            if fault is None:
                self._count(hits=1)
                return entry
            if fault != _ABSENT:
                self._drop(entry, fault)
            elif self._earlier and self._adopt(_earlier_name(volume_path, size, mtime_ns, span), entry, length):
                self._count(hits=1)
                return entry
            if not self._reserve(length):
                self._count(not_admitted=1)
                return None
            # A stale .part of this key holds at most `length` bytes (size and span are in the
            # key), so writing `length` bytes from offset 0 leaves exactly the entry.
            self._copy_counted(source, volume_path, size, mtime_ns, span, fd, part, entry, opened)
        return entry

    def _adopt(self, earlier: str, entry: str, length: int) -> bool:
        """Whether the copy that an earlier layout kept at `earlier` (under objects/) is now `entry`, and sound.

        A cache made before keeps serving after an upgrade: each copy moves to
        its new name the first time its file is asked for (a link, then the old
        name removed), counted in the ledger as before; none is fetched again.
        The caller holds the entry's lock.
        """
        old = os.path.join(self._objects, earlier)
        try:
            os.link(old, entry)
        except (FileNotFoundError, FileExistsError):  # none; or a hedge published meanwhile, then prune takes it
            return False
        _unlink(old)
        fault = self._fault(entry, length)
        if fault is not None:
            self._drop(entry, fault)
        return fault is None

    def _hedge(self, source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None,
               entry: str, opened: int | None) -> str | None:
        length = _length(size, span)
        if not self._reserve(length):
            self._count(not_admitted=1)
            return None
        fd, name = _private_file(os.path.dirname(entry), os.path.basename(entry))
        try:
            won = self._copy_counted(source, volume_path, size, mtime_ns, span, fd, name or f"/proc/self/fd/{fd}",
                                     entry, opened)
        finally:
            os.close(fd)
            if name:
                _unlink(name)
        # Losing to a damaged copy that the first request has not removed yet: serve from the volume.
        return entry if won or self._fault(entry, length) is None else None

    def _copy_counted(self, source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None, fd: int,
                      copy: str, entry: str, opened: int | None) -> bool:
        """Copy into `fd` (named `copy`), its bytes reserved already; count them as held, then publish it (see
        `_publish`). True if it became the entry; else (it came second) its bytes are taken off the ledger
        again, as they are given back if the copy fails.

        Counted first: a process killed between the two leaves bytes counted
        that no copy holds, never a copy uncounted.
        """
        length = _length(size, span)
        try:
            _record(fd, length, copy_into(source, volume_path, size, mtime_ns, fd, span, checksum=self.verify,
                                          remote=transport.remote(source), opened=opened))
        except BaseException:
            self._ledger.release(length)
            raise
        self._ledger.commit(length)
        won = False
        try:
            won = _publish(copy, entry)
        finally:
            if not won:
                self._ledger.remove(length)
        if won:
            self._count(misses=1, bytes_fetched=length)
        return won

    def _fault(self, entry: str, length: int) -> str | None:
        """None if the copy at `entry` is sound, and then its use is recorded; else what is wrong (`_ABSENT`: none).

        The length check reuses the `stat` that finds the entry: a hit costs no
        more system calls for it.
        """
        try:
            st = os.stat(entry)
        except FileNotFoundError:
            return _ABSENT
        if st.st_size != length:
            return f"holds {st.st_size} of its {length} bytes"
        if self.verify:
            fault = _content_fault(entry, length)
            if fault is not None:
                return fault
        now = time.time_ns()
        if now - st.st_atime_ns > _ATIME_REFRESH_NS:  # atime drives prune's LRU; a minute is fine enough
            try:
                os.utime(entry, ns=(now, st.st_mtime_ns))
            except FileNotFoundError:  # removed since the stat (prune, clear, a damaged copy's reader)
                return _ABSENT
        return None

    def _drop(self, entry: str, fault: str) -> None:
        """Remove the copy at `entry`, which failed its check, and log it; the caller holds the entry's lock.

        Under that lock no fetcher can publish a sound copy in its place, so
        two processes that find one damaged copy never remove a good one. A
        copy that has no checksum for `verify` to check is no damaged copy: it
        goes uncounted.
        """
        try:
            held = os.stat(entry).st_size
            os.unlink(entry)
        except FileNotFoundError:
            return
        self._ledger.remove(held)
        if fault == _UNCHECKED:
            return
        self._count(damaged=1)
        log.warning("the node cache's copy %s %s: removed, fetched again", entry, fault)
        line = f"{time.time():.0f} {os.path.basename(entry)} {fault}\n".encode()
        fd = os.open(self._damage_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)  # one append: lines from several processes never interleave
        finally:
            os.close(fd)

    def damaged(self) -> int:
        """Damaged copies found (and removed) in this cache so far, by every process: the lines of its `damaged` log."""
        try:
            with open(self._damage_log, "rb") as f:
                return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 16), b""))
        except FileNotFoundError:
            return 0

    def usage(self) -> int:
        """Bytes held and reserved for copies in progress, as the node's ledger records them (see
        `air_core.io.cache_ledger`): counted again from the disk first when it cannot be trusted, unless
        another process is counting it (then the figure from before)."""
        return self._ledger.used()

    def prune(self, older_than: float | None = None) -> int:
        """Remove entries unused for `older_than` seconds, then least recently used ones down to the cap.

        The cap is this handle's, else the node cache's (see `usage`).
        Entries used in the last `IN_USE_SECONDS` stay either way: a reader
        may hold their path. Returns the bytes freed. Two passes over the
        entries with their times and sizes in arrays, so a cache of 10^7
        files is pruned in a few hundred MB of memory. The first pass counts
        the bytes held again for the ledger; the second also removes what
        crashed fetches left (see `_remove_leftover`), and takes the bytes it
        removed off the ledger: copies fetched meanwhile stay counted.
        """
        now = time.time()
        with self._ledger.recount() as counted:
            atimes, sizes = _survey(self._objects)
            counted(int(sizes.sum()))
        cut = -np.inf if older_than is None else now - older_than
        total, cap = int(sizes.sum()), self._cap()
        if cap is not None and total > cap:
            order = np.argsort(atimes, kind="stable")
            k = int(np.searchsorted(np.cumsum(sizes[order]), total - cap))
            cut = max(cut, float(atimes[order[min(k, len(order) - 1)]]))
        cut = min(cut, now - IN_USE_SECONDS)
        freed = 0
        for e in _files(self._objects):
            if e.name.startswith("."):
                _remove_leftover(e.path, now)
                continue
            st = e.stat(follow_symlinks=False)
            if st.st_atime <= cut and _unlink(e.path):
                freed += st.st_size
        self._ledger.remove(freed)
        return freed

    def clear(self) -> int:
        """Remove every entry and saved listing, in use or not; returns the bytes freed.

        Paths that running jobs were handed stop existing: stop them first.
        """
        freed = 0
        for e in _files(self._objects):
            if e.name.startswith("."):
                _remove_leftover(e.path, time.time())
                continue
            size = e.stat(follow_symlinks=False).st_size
            if _unlink(e.path):
                freed += size
        shutil.rmtree(os.path.join(self.root, "manifests"), ignore_errors=True)
        self._ledger.remove(freed)
        return freed

    def info(self) -> dict:
        """The cache's folder, bytes and entries held (counted now), cap (this handle's, else the node cache's),
        disk's free bytes, damaged copies found."""
        atimes, sizes = _survey(self._objects)
        return {"folder": self.root, "bytes": int(sizes.sum()), "entries": len(sizes),
                "limit_bytes": self._cap(), "disk_free_bytes": shutil.disk_usage(self.root).free,
                "oldest_use": float(atimes.min()) if len(atimes) else None, "damaged": self.damaged()}

    def check(self, repair: bool = False) -> CheckReport:
        """Hash every entry against the length and checksum recorded when it was copied; `repair`: remove those that fail.

        Reads every byte the cache holds. A damaged entry is removed even if
        in use: a reader of it would get wrong bytes anyway; the next read of
        its file fetches it again.
        """
        report = CheckReport(repaired=repair)
        for e in _entries(self._objects):
            try:
                fd = os.open(e.path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                st = os.fstat(fd)
                report.entries += 1
                report.bytes += st.st_size
                length = _recorded_length(fd)
                if length is None:
                    report.unchecked += 1
                    continue
                fault = f"holds {st.st_size} of its {length} bytes" if st.st_size != length else \
                    _content_fault(fd, length)
            finally:
                os.close(fd)
            if fault is None:
                continue
            report.damaged.append(e.path)
            if repair:
                with _claimed(e.path):
                    if _inode(e.path) == st.st_ino:  # not a sound copy fetched since
                        self._drop(e.path, fault)
        return report

    def _cap(self) -> int | None:
        """The cap this handle admits under: its own, else the node cache's (the last a capped handle recorded)."""
        return self.limit_bytes if self.limit_bytes is not None else self._ledger.cap()

    def _reserve(self, nbytes: int) -> bool:
        """Reserve `nbytes` for a copy in the node's ledger, if they fit under the cap and the free-disk reserve."""
        return self._disk_has_room(nbytes) and self._ledger.reserve(nbytes, self.limit_bytes)

    def _disk_has_room(self, nbytes: int) -> bool:
        """Free space minus `nbytes` stays above the reserve; the disk is asked every 64 MiB."""
        with self._lock:
            if self._free is None or self._unchecked + nbytes > _RECHECK_BYTES:
                self._free, self._unchecked = shutil.disk_usage(self.root).free, 0
            if self._free - self._unchecked - nbytes < self.reserve_bytes:
                return False
            self._unchecked += nbytes
            return True

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)


_handles: weakref.WeakSet[Cache] = weakref.WeakSet()


def _start_handles() -> None:
    for cache in _handles:
        cache._start()


os.register_at_fork(after_in_child=_start_handles)


def _files(objects: str) -> Iterator[os.DirEntry]:
    """Every file under `objects`: entries, and hidden copies in progress (or left by a crash); in every folder
    there, so that what an earlier layout left (see `Cache._adopt`) is counted, pruned and cleared too."""
    with os.scandir(objects) as folders:
        # An earlier layout's folders first ("ab" before "a"): a copy moved meanwhile to its new name, in a
        # folder listed later, is counted once or twice by a count running then, never missed.
        shards = sorted((f.path for f in folders if f.is_dir(follow_symlinks=False)), reverse=True)
    for shard in shards:
        with os.scandir(shard) as it:
            yield from (e for e in it if e.is_file(follow_symlinks=False))


def _entries(objects: str) -> Iterator[os.DirEntry]:
    """Every published entry under `objects` (not the hidden copies in progress), folder by folder."""
    return (e for e in _files(objects) if not e.name.startswith("."))


def _survey(objects: str) -> tuple[np.ndarray, np.ndarray]:
    """(last use, size) of every entry under `objects`, as float64 and int64 arrays."""
    atimes, sizes = array("d"), array("q")
    for e in _entries(objects):
        st = e.stat(follow_symlinks=False)
        atimes.append(st.st_atime)
        sizes.append(st.st_size)
    return np.frombuffer(atimes, dtype=np.float64), np.frombuffer(sizes, dtype=np.int64)


def _entry_path(objects: str, volume_path: str, size: int, mtime_ns: int, span: Span | None) -> str:
    return _entry_paths(objects, volume_path, size, mtime_ns, span)[0]


@lru_cache(maxsize=1 << 16)
def _entry_paths(objects: str, volume_path: str, size: int, mtime_ns: int, span: Span | None) -> tuple[str, str]:
    """The entry's path, and its path under `objects`."""
    # Every later epoch asks again, so answers are remembered; boundedly: a stream of 10^7 files must
    # not hold a dict of them all (once past the bound, a cyclic pass just hashes again, ~1 us a file).
    key = _key(volume_path, size, mtime_ns, span)
    name = f"{key[0]}/{key[1:1 + _NAME_CHARS]}"
    if span is not None:  # a range of a large file: its name's length costs nothing, and a listing can tell it
        name += f"-{_readable(volume_path, span)}"
    return f"{objects}/{name}", name


def _key(volume_path: str, size: int, mtime_ns: int, span: Span | None) -> str:
    ranged = "" if span is None else f"\0{span[0]}\0{span[1]}"
    return hashlib.sha256(f"{volume_path}\0{size}\0{mtime_ns}{ranged}".encode()).hexdigest()


def _readable(volume_path: str, span: Span | None) -> str:
    """What a listing of the cache can read in an entry's name: a span's bounds, and the file's name."""
    return ("" if span is None else f"{span[0]}-{span[1]}-") + volume_path.rsplit("/", 1)[-1][-96:]


def _earlier_name(volume_path: str, size: int, mtime_ns: int, span: Span | None) -> str:
    """Where the layout of versions before 16 folders kept this entry, under objects/: 256 folders, and
    names of 40 hex digits, then what a listing can read (see `_readable`)."""
    key = _key(volume_path, size, mtime_ns, span)[:40]
    return f"{key[:2]}/{key}-{_readable(volume_path, span)}"


def _length(size: int, span: Span | None) -> int:
    return size if span is None else span[1] - span[0]


@contextmanager
def _claimed(entry: str) -> Iterator[tuple[int, str]]:
    """(descriptor, path) of the entry's `.part` file, exclusively locked; removed on leaving.

    Whoever holds the lock may remove the `.part` (a fetch when it is done,
    whatever the outcome, or `prune`), so a waiter that gets the lock checks
    that its file still has the name, and else locks the one there now:
    `.part` files never outlive their fetch, except a killed one's.
    """
    part = os.path.join(os.path.dirname(entry), "." + os.path.basename(entry) + ".part")
    while True:
        fd = lock_file(part, os.O_RDWR | os.O_CREAT)  # read too: under `verify`, the copy is hashed back
        if _inode(part) == os.fstat(fd).st_ino:
            break
        unlock_file(fd)
    try:
        yield fd, part
    finally:
        _unlink(part)
        unlock_file(fd)


def _remove_leftover(path: str, now: float) -> None:
    """Remove a hidden file no fetch is using: a `.part` whose lock is free, or a hedge's copy an hour old.

    A killed fetch leaves its `.part`; one whose file is never read again
    would stay. Taking its lock without waiting tells it from a copy in
    progress. (Hedges copy into unnamed files where the file system allows.)
    """
    if not path.endswith(".part"):
        try:
            if now - os.stat(path).st_mtime > IN_USE_SECONDS:
                os.unlink(path)
        except FileNotFoundError:
            pass
        return
    try:
        fd = lock_file(path, os.O_WRONLY, wait=False)
    except FileNotFoundError:
        return
    if fd is None:
        return  # a copy in progress
    try:
        _unlink_if_same(path, fd)
    finally:
        unlock_file(fd)


def copy_into(source: str, volume_path: str, size: int, mtime_ns: int, fd: int, span: Span | None = None, *,
              checksum: bool = False, remote: FilesApi | None = None, opened: int | None = None) -> int | None:
    """Copy `source` (or its bytes `span`) into the open file `fd` from offset 0, checking it is the listed version.

    With `checksum`, returns the copy's checksum (`_digest`), else None. A copy
    that fits one range goes through `sendfile`, inside the kernel (no Python
    buffer, few system calls: a cold pass of small files costs a third less
    CPU per file than a copy through a buffer), and its checksum, if asked
    for, is then hashed back from the page cache (a read and a hash of the
    bytes just written, the interpreter's lock let go for the read: one more
    pass over them, ~0.1 ms of CPU a 150 KiB file on a busy 2-core machine,
    no more than a copy through a buffer costs; a cold epoch of such files,
    bound by its CPU there, ran at ~0.9x with it, which is why it is not
    taken unasked); a copy by ranges, or over the Files API, hashes the
    bytes as they pass through this process. A volume's bandwidth is per open file, so a copy over
    `_RANGE_FROM` bytes is made of `_RANGE`-byte ranges, up to
    `_RANGE_THREADS` at once, each through its own open: a single large file
    (a Parquet export) then arrives several times faster than one stream
    allows. A range far slower than the others is hedged (`ordered_map`); the
    copy that loses stops at its next chunk, and writes the same bytes
    through a descriptor of its own until then, so returning late it cannot
    write into whatever file reuses `fd`'s number. `remote`: the Files API client through which `source`'s
    volume is reached (`transport.remote(source)`), else None: `source` is then a local path. `opened`: a
    descriptor of `source`'s listed version, read from (a copy of one range) rather than opening it again.
    """
    begin, end = (0, size) if span is None else span
    if not 0 <= begin <= end <= size:
        raise OptionError(f"bytes {begin}-{end} of {volume_path}, which holds {size}: not a range of it")
    if end - begin > _RANGE_FROM:
        bounds = [(start, min(start + _RANGE, end)) for start in range(begin, end, _RANGE)]
        done = threading.Event()
        try:
            copy = _copy_range if remote is None else functools.partial(_download_range, remote)
            parts = list(ordered_map(lambda b: copy(source, volume_path, size, mtime_ns, fd, *b, begin, done),
                                     ((b, b[1] - b[0]) for b in bounds), threads=_RANGE_THREADS,
                                     max_ahead=len(bounds), max_bytes=end - begin, hedge_floor=_RANGE_HEDGE_FLOOR_S))
        finally:
            done.set()
        copied, blocks = sum(n for n, _ in parts), [b for _, bs in parts for b in bs]
    elif remote is not None:
        copied, blocks = _download(remote, volume_path, size, mtime_ns, fd, begin, end, begin)
    else:
        src = open_version(source, volume_path, size, mtime_ns) if opened is None else opened
        try:
            copied = send_range(src, fd, begin, end)  # at `fd`'s position: its start, the file being new
        finally:
            if opened is None:
                os.close(src)
        blocks = _blocks(fd, copied) if checksum else []
    if copied != end - begin:
        raise FetchError(0, f"{volume_path} changed while being read ({copied} of {end - begin} bytes)")
    return _digest(blocks) if checksum else None


def _download_range(remote: FilesApi, source: str, volume_path: str, size: int, mtime_ns: int, dst: int,
                    start: int, stop: int, base: int, done: threading.Event) -> tuple[int, list[int]]:
    """`_copy_range` over the Files API."""
    own = os.dup(dst)
    try:
        return _download(remote, volume_path, size, mtime_ns, own, start, stop, base, done)
    finally:
        os.close(own)


def _copy_range(source: str, volume_path: str, size: int, mtime_ns: int, dst: int, start: int, stop: int,
                base: int, done: threading.Event) -> tuple[int, list[int]]:
    src = open_version(source, volume_path, size, mtime_ns)
    try:
        own = os.dup(dst)
        try:
            return _copy(src, own, start, stop, base, done)
        finally:
            os.close(own)
    finally:
        os.close(src)


def _copy_buffer() -> memoryview:
    """This thread's copy buffer, made once: a chunk read into fresh memory costs a mapping and its page faults
    (bytes over 128 KiB are mapped per allocation), more than the copy itself."""
    buffer = getattr(_buffers, "view", None)
    if buffer is None:
        buffer = _buffers.view = memoryview(bytearray(_COPY_CHUNK))
    return buffer


def _copy(src: int, dst: int, start: int, stop: int, base: int, done: threading.Event | None = None
          ) -> tuple[int, list[int]]:
    """Copy bytes [start, stop) of `src` to `base` bytes earlier in `dst`, until `done`.

    Returns (bytes copied, xxh3-64 of each `_RANGE` bytes from `start`):
    each chunk is hashed between its read and its write, while it is in the
    CPU's cache, so the checksum costs no second pass. Reads and writes are
    positional, so threads may share `dst`; no read crosses a block's end,
    so blocks are cut alike whatever lengths the reads return.
    """
    buffer = _copy_buffer()
    at, blocks, h = start, [], xxhash.xxh3_64()
    while at < stop and not (done and done.is_set()):
        n = os.preadv(src, [buffer[:min(stop - at, _COPY_CHUNK, _RANGE - (at - start) % _RANGE)]], at)
        if not n:
            break
        chunk = buffer[:n]
        h.update(chunk)
        written = os.pwrite(dst, chunk, at - base)
        while written < n:  # a short write: the disk filled under another writer
            written += os.pwrite(dst, chunk[written:], at + written - base)
        at += n
        if (at - start) % _RANGE == 0 or at == stop:
            blocks.append(h.intdigest())
            h.reset()
    return at - start, blocks


def _download(api: FilesApi, volume_path: str, size: int, mtime_ns: int, dst: int, start: int, stop: int, base: int,
              done: threading.Event | None = None) -> tuple[int, list[int]]:
    """`_copy` over the Files API: bytes [start, stop) of the listed version of `volume_path` to `base` bytes
    earlier in `dst`, by ranged requests, with the same blocks' checksums; until `done`."""
    blocks, h = [], xxhash.xxh3_64()

    def write(view: memoryview, at: int) -> None:
        written = 0
        while written < len(view):
            written += os.pwrite(dst, view[written:], at + written - base)
        while view:  # a chunk may cross a block's end: the blocks are cut as `_copy` cuts them
            room = _RANGE - (at - start) % _RANGE
            part, view = view[:room], view[room:]
            h.update(part)
            at += len(part)
            if (at - start) % _RANGE == 0:
                blocks.append(h.intdigest())
                h.reset()

    copied = api.read(volume_path, start, stop, write, size=size, mtime_ns=mtime_ns, done=done)
    if copied % _RANGE:
        blocks.append(h.intdigest())
    return copied, blocks


def _digest(blocks: list[int]) -> int:
    """A copy's checksum: xxh3-64 of the xxh3-64 of each of its `_RANGE`-byte blocks.

    Blocks hashed apart can be copied at once, as ranges are; xxh3 runs at
    ~20 GB/s, a few microseconds for a 150 KiB file.
    """
    return xxhash.xxh3_64_intdigest(b"".join(b.to_bytes(8, "big") for b in blocks))


def _blocks(fd: int, length: int) -> list[int]:
    """The xxh3-64 of each `_RANGE` bytes of the first `length` bytes of the open file `fd` (fewer if it holds
    fewer), read through this thread's copy buffer."""
    buffer = _copy_buffer()
    blocks, h = [], xxhash.xxh3_64()
    at = 0
    while at < length:
        n = os.preadv(fd, [buffer[:min(length - at, _COPY_CHUNK, _RANGE - at % _RANGE)]], at)
        if not n:
            break
        h.update(buffer[:n])
        at += n
        if at % _RANGE == 0 or at == length:
            blocks.append(h.intdigest())
            h.reset()
    return blocks


def _file_digest(fd: int, length: int) -> int:
    """The checksum (`_digest`) of the first `length` bytes of the open file `fd` (fewer if it holds fewer)."""
    return _digest(_blocks(fd, length))


def _checksum(length: int, digest: int) -> bytes:
    return b"%d %016x" % (length, digest)


def _record(fd: int, length: int, digest: int | None) -> None:
    """Keep the copy's length and checksum (None: none was taken) with it, before it is published: they
    appear together."""
    if digest is None:
        return
    try:
        os.setxattr(fd, _CHECKSUM_ATTR, _checksum(length, digest))
    except OSError as e:
        if e.errno != errno.EOPNOTSUPP:
            raise  # a file system without extended attributes: hits check the length alone


def _recorded_length(fd: int) -> int | None:
    """The length recorded with the open copy `fd`; None when none was recorded (or it is unreadable)."""
    try:
        fields = os.getxattr(fd, _CHECKSUM_ATTR).split()
    except OSError:
        return None
    return int(fields[0]) if len(fields) == 2 and fields[0].isdigit() else None


def _content_fault(copy: str | int, length: int) -> str | None:
    """What is wrong with the bytes of `copy` (a path, or an open descriptor) against their checksum; None: nothing."""
    fd = os.open(copy, os.O_RDONLY) if isinstance(copy, str) else copy
    try:
        try:
            recorded = os.getxattr(fd, _CHECKSUM_ATTR)
        except OSError:  # none recorded, or a file system that keeps none
            return _UNCHECKED
        if recorded != _checksum(length, _file_digest(fd, length)):
            return "holds bytes that differ from the ones its checksum was recorded from"
        return None
    finally:
        if fd is not copy:
            os.close(fd)


def _require_attributes(probe: str) -> None:
    """Refuse `verify` where checksums cannot be kept: every hit would otherwise fetch again."""
    fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.setxattr(fd, "user.air.probe", b"")
        os.removexattr(fd, "user.air.probe")
    except OSError as e:
        raise OptionError(
            f"verify=True checks each cached copy against a checksum kept in an extended attribute, which "
            f"the file system of {os.path.dirname(probe)} does not keep ({e.strerror}): set {CACHE_DIR_ENV} to "
            "a folder on a local disk (ext4, xfs), or leave verify off (lengths are checked on every hit anyway)"
        ) from None
    finally:
        os.close(fd)


def read_bytes(source: str, volume_path: str, size: int, mtime_ns: int, span: Span | None = None) -> bytes:
    """Read `source` whole (or its bytes `span`) into memory, checking it is the listed version."""
    begin, end = (0, size) if span is None else span
    if (api := transport.remote(source)) is not None:
        buffer = bytearray(end - begin)

        def write(view: memoryview, at: int) -> None:
            buffer[at - begin:at - begin + len(view)] = view

        n = api.read(volume_path, begin, end, write, size=size, mtime_ns=mtime_ns)
        if n != end - begin:
            raise FetchError(0, f"{volume_path} changed while being read ({n} of {end - begin} bytes)")
        return bytes(buffer)
    fd = open_version(source, volume_path, size, mtime_ns)
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


def _private_file(folder: str, name: str) -> tuple[int, str | None]:
    """A new 0600 file for writing (and reading back) in `folder`: unnamed where the file system allows, else hidden."""
    try:
        return os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600), None
    except (AttributeError, OSError):  # no O_TMPFILE on this OS or file system
        fd, path = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".hedge")
        return fd, path


def _publish(copy: str, entry: str) -> bool:
    """Give the complete `copy` the entry's name unless a copy already has it; True if this one did.

    A link, not a rename: a rename would replace the entry another fetcher just
    published (and that readers may hold), and count the file twice.
    """
    try:
        if copy.startswith("/proc/self/fd/"):  # an unnamed copy: linkat(AT_SYMLINK_FOLLOW), which a dir_fd makes
            folder = os.open(os.path.dirname(entry), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.link(copy, os.path.basename(entry), dst_dir_fd=folder, follow_symlinks=True)
            finally:
                os.close(folder)
        else:  # one system call, not three: each lets another fetch thread take the interpreter's lock
            os.link(copy, entry)
    except FileExistsError:
        return False
    return True


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _unlink_if_same(path: str, fd: int) -> None:
    """Remove `path` if it is still the file open as `fd` (whose lock we hold)."""
    if _inode(path) == os.fstat(fd).st_ino:
        _unlink(path)


def _unlink(path: str) -> bool:
    """Remove `path`; False if it was gone already."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
