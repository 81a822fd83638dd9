"""The node cache's ledger: the bytes its copies hold and those reserved for copies in progress, and its cap.

One ledger per cache folder, kept by every handle on the node, capped or
not: a copy is admitted only if its bytes fit under the cap with all the
others counted, whichever process or reader made them. The cap is the node
cache's: a capped handle records its cap in the ledger each time it asks to
admit a copy, and a handle made without one (a reader inside the library,
a later job) keeps to the cap recorded. A hit never reads the ledger.

The ledger is one line, `<held> <reserved> <cap> <counting> <boot id>`,
read and written whole under an exclusive `flock` of its file, `usage`,
which each process opens once. A copy costs two changes of the ledger, and
each system call is a turn of the interpreter's lock for a process's fetch
threads: the changes its threads ask for at once are applied together, by
whichever takes the next turn, under one lock, read and write of the file.
Every change is a difference applied under that lock (a copy's bytes
reserved, then held once it is published, or given back; a pruned copy's
removed), so changes made at once by several processes all count.

A copy's reservation is the reserving process's until the copy is
published or fails. Each process that reserves keeps the sum of its open
reservations in a file of its own under `reserved/`, locked while the
process lives, and updated under the ledger's lock with the ledger: a
process killed mid-copy leaves its file, and its lock, now free, says its
reservations are dead. The reserved bytes are counted again from the files
of the processes alive, and the files of those that ended removed, when a
copy would not fit while others hold reservations, when a process makes
its file, and by a count.

A copy's bytes are counted as held before it is published, so a process
killed between the two leaves bytes counted that no copy holds (the cache
then admits a little less), never a copy uncounted.

The bytes held are counted again from the disk when the ledger was written
before the machine last booted (a crash may have lost copies it counts) or
is torn, and by `prune`. The count scans every entry without the ledger's
lock: the call that finds the ledger to be counted marks it as counting,
scans under a lock of its own (`counting`, free again if its process dies,
and then the next reader of the ledger counts again), and then sets the
bytes held to those it found plus the bytes of the copies published
meanwhile. Meanwhile every other call goes on against the bytes recorded
before (none, from a ledger torn past reading). A copy published
during a scan that also finds it, or removed during a scan that had counted
it, is counted twice or kept counted: the ledger can count more than the
disk holds, never less.
"""

from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator, TypeVar

from .node_lock import lock_file, unlock_file

T = TypeVar("T")
_LINE = 128  # the ledger's line, padded: every write replaces the whole of the one before
_SHARE = 20  # a process's file under reserved/: its reserved bytes, padded


@dataclass
class Usage:
    """The ledger's fields.

    Attributes:
        held: bytes of the copies published.
        reserved: bytes reserved for copies in progress.
        cap: the node cache's cap, the last a capped handle asked to admit a copy under; None: none given.
        counting: while the bytes held are counted again, the bytes published since the count began; else None.
    """

    held: int
    reserved: int
    cap: int | None
    counting: int | None


@dataclass
class _Change:
    """A change of a ledger's fields that one thread asked for, and its outcome once applied."""

    apply: Callable[[Usage], Any]
    done: bool = False
    result: Any = None
    error: BaseException | None = None


@dataclass
class _Share:
    fd: int
    nbytes: int = 0
    written: int = -1  # what its file holds: it is written once a turn of the ledger, not once a change


# This process's share of the reservations, per cache folder; changed only under the ledger's lock and `_turn`.
_shares: dict[str, _Share] = {}
# This process's descriptor of each ledger file, opened under `_turn`: a forked child opens its own (an `flock`
# belongs to the open file, which a child shares with its parent).
_ledgers: dict[str, int] = {}
_turn = threading.Lock()
# The changes this process's threads asked for, by ledger file, applied by the next thread to take `_lead`.
_asked: dict[str, list[_Change]] = {}
_asking = threading.Lock()
_lead = threading.Lock()


class Ledger:
    """The ledger of the node cache at `root`; `scan()` counts the bytes its copies hold, from the disk."""

    def __init__(self, root: str, scan: Callable[[], int]) -> None:
        self._file = os.path.join(root, "usage")
        self._reserved = os.path.join(root, "reserved")
        self._counter = os.path.join(root, "counting")
        self._scan = scan

    def used(self) -> int:
        """Bytes held and reserved (the dead processes' reservations given back first)."""
        def used(u: Usage) -> int:
            self._reclaim(u)
            return u.held + u.reserved

        return self._change(used)

    def cap(self) -> int | None:
        """The node cache's cap recorded; None if no capped handle recorded one."""
        return self._change(lambda u: u.cap)

    def reserve(self, nbytes: int, cap: int | None) -> bool:
        """Reserve `nbytes` for a copy, if they fit under `cap` (recorded as the node's), else under the node's."""
        def reserve(u: Usage) -> bool:
            nonlocal cap
            if cap is None:
                cap = u.cap
            else:
                u.cap = cap
            if self._reserved not in _shares:  # this process's first: its file made, those of ended ones removed
                u.reserved = self._live()
                self._share(0)
            elif cap is not None and u.held + u.reserved + nbytes > cap:
                self._reclaim(u)
            if cap is not None and u.held + u.reserved + nbytes > cap:
                return False
            u.reserved += nbytes
            self._share(nbytes)
            return True

        return self._change(reserve)

    def commit(self, nbytes: int) -> None:
        """Count `nbytes` this process reserved as held: its copy is about to be published."""
        def commit(u: Usage) -> None:
            self._share(-nbytes)
            u.reserved = max(0, u.reserved - nbytes)
            u.held += nbytes
            if u.counting is not None:
                u.counting += nbytes

        self._change(commit)

    def release(self, nbytes: int) -> None:
        """Give back `nbytes` this process reserved for a copy that failed."""
        def release(u: Usage) -> None:
            self._share(-nbytes)
            u.reserved = max(0, u.reserved - nbytes)

        self._change(release)

    def remove(self, nbytes: int) -> None:
        """Count `nbytes` less held: copies removed (pruned, damaged, or published second)."""
        def remove(u: Usage) -> None:
            u.held = max(0, u.held - nbytes)

        if nbytes:
            self._change(remove)

    @contextmanager
    def recount(self) -> Iterator[Callable[[int], None]]:
        """Count the bytes held again: yields `counted`, to call with the bytes of a scan of the disk made
        meanwhile (outside the ledger's lock); those of copies published during it are added to them."""
        counter = lock_file(self._counter)  # one count at a time: wait for one running
        try:
            with self._open([]) as u:
                self._begin(u)
            yield self._end
        finally:
            unlock_file(counter)

    def _change(self, apply: Callable[[Usage], T]) -> T:
        """`apply(fields)` under the ledger's lock, its changes written; with those that this process's other threads
        asked for meanwhile, which the first of them to take the lead applies, in the order asked, for all.

        The call that finds the ledger to be counted again counts it first, outside the lead, and then applies
        its change; the changes asked for meanwhile go on against the figure from before (see the module's
        docstring)."""
        mine = _Change(apply)
        while True:
            with _asking:
                _asked.setdefault(self._file, []).append(mine)
            with _lead:
                counter = None if mine.done else self._apply_asked(mine)
            if counter is None:
                break
            try:
                self._end(self._scan())
            finally:
                unlock_file(counter)
        if mine.error is not None:
            raise mine.error
        return mine.result

    def _apply_asked(self, mine: _Change) -> int | None:
        """Apply the changes asked for, `mine` among them, in one turn of the ledger's lock; the caller holds `_lead`.

        Returns the lock of a count that this turn began, else None. A turn that begins a count applies no
        change: the others' go to the next lead, `mine` waits for the count."""
        with _asking:
            batch = _asked.pop(self._file)
        due: list[int] = []
        try:
            with self._open(due) as u:
                for change in () if due else batch:
                    try:
                        change.result = change.apply(u)
                    except Exception as e:  # its asker's to raise; the others' changes stand
                        change.error = e
        except BaseException as e:
            for change in batch:
                change.error = change.error or e
        if due:
            with _asking:
                _asked[self._file] = [c for c in batch if c is not mine] + _asked.get(self._file, [])
            return due[0]
        for change in batch:
            change.done = True
        return None

    @contextmanager
    def _open(self, due: list[int]) -> Iterator[Usage]:
        """The ledger's fields, under its lock, written back on leaving. Where they cannot be trusted and no count
        is running, a count begins: its lock is added to `due`, for the caller to scan once this lock is let go.
        This process's threads take turns for the lock, so at most one of them waits on it."""
        with _turn:
            fd = _ledgers.get(self._file)
            if fd is None:
                fd = _ledgers[self._file] = os.open(self._file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                u, trusted = _parse(os.pread(fd, _LINE, 0))
                if not trusted or u.counting is not None:
                    counter = lock_file(self._counter, wait=False)  # None: a count is running
                    if counter is not None:
                        due.append(counter)
                    if counter is not None or not trusted:
                        self._begin(u)
                yield u  # until a running count ends, the figure from before stands
                self._write_share()
                _write(fd, u)
            except BaseException:
                for counter in due:
                    unlock_file(counter)
                due.clear()
                raise
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _begin(self, u: Usage) -> None:
        u.counting = 0
        u.reserved = self._live()

    def _end(self, held: int) -> None:
        with self._open([]) as u:
            u.held, u.counting = held + (u.counting or 0), None

    def _reclaim(self, u: Usage) -> None:
        """Give back what dead processes reserved, when others than this one hold reservations."""
        share = _shares.get(self._reserved)
        if u.reserved > (share.nbytes if share else 0):
            u.reserved = self._live()

    def _live(self) -> int:
        """The bytes reserved by processes alive, from their files; the files of dead ones are removed."""
        self._write_share()
        try:
            names = os.listdir(self._reserved)
        except FileNotFoundError:
            return 0
        total = 0
        for name in names:
            path = os.path.join(self._reserved, name)
            try:
                fd = lock_file(path, os.O_RDONLY, wait=False)
            except FileNotFoundError:
                continue
            if fd is None:  # its process holds its lock: alive
                with open(path, "rb") as f:
                    total += int(f.read(_SHARE) or 0)
            else:
                os.unlink(path)
                unlock_file(fd)
        return total

    def _share(self, nbytes: int) -> None:
        """Add `nbytes` to this process's reservations in this cache, kept in its file under reserved/ (made at
        its first, kept while it lives: one file a process, not one a copy)."""
        share = _shares.get(self._reserved)
        if share is None:
            path = os.path.join(self._reserved, f"{os.getpid()}-{os.urandom(4).hex()}")
            try:
                fd = lock_file(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            except FileNotFoundError:  # the cache's first reservation
                os.makedirs(self._reserved, mode=0o700, exist_ok=True)
                fd = lock_file(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            share = _shares[self._reserved] = _Share(fd)
        share.nbytes = max(0, share.nbytes + nbytes)

    def _write_share(self) -> None:
        """Write this process's reservations in this cache to its file, if they changed since it was written: before
        the ledger's line, and before the files are counted."""
        share = _shares.get(self._reserved)
        if share is not None and share.written != share.nbytes:
            os.pwrite(share.fd, b"%*d" % (_SHARE, share.nbytes), 0)
            share.written = share.nbytes


def _write(fd: int, u: Usage) -> None:
    """Write the ledger's line, whole, in one `pwrite`; -1 stands for None."""
    line = f"{u.held} {u.reserved} {_or(u.cap)} {_or(u.counting)} {_boot_id()}".ljust(_LINE - 1) + "\n"
    os.pwrite(fd, line.encode(), 0)


def _or(n: int | None) -> int:
    return -1 if n is None else n


def _parse(raw: bytes) -> tuple[Usage, bool]:
    """The ledger's fields, and whether they can be trusted: a whole line, written in this boot.

    One that cannot be read whole is counted again, from the bytes it begins with if any (an earlier
    version's ledger, `<bytes> <boot id>`): they stand for the bytes held until the count ends.
    """
    fields = raw.split(b"\n", 1)[0].split()
    try:
        held, reserved, cap, counting = (int(f) for f in fields[:4])
        boot = fields[4].decode()
    except (ValueError, IndexError, UnicodeDecodeError):
        return Usage(int(fields[0]) if fields and fields[0].isdigit() else 0, 0, None, None), False
    u = Usage(max(0, held), max(0, reserved), None if cap < 0 else cap, None if counting < 0 else counting)
    return u, len(fields) == 5 and boot == _boot_id()


@lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:  # no way to tell boots apart here: a ledger is trusted until torn
        return "-"


def _forget_parent() -> None:
    """In a forked child: the parent's reservations and ledger descriptors stay the parent's, and its threads' turns
    are gone."""
    global _turn, _asking, _lead
    _turn, _asking, _lead = threading.Lock(), threading.Lock(), threading.Lock()
    _shares.clear()
    _asked.clear()
    for fd in _ledgers.values():
        os.close(fd)  # the parent's lock, if one of its threads holds it, stays the parent's until it lets go
    _ledgers.clear()


os.register_at_fork(after_in_child=_forget_parent)
