"""Locks on this node's local disk, shared by its processes.

A volume has no locks, a local disk does: the writers of one destination on
one node (`export_delta`'s publication, `pack`'s writer) take turns under
`node_lock`, so the second finds the first's work done instead of writing it
again.

`lock_file` holds a file's `flock` (the node cache's entries and ledger).
An `flock` belongs to the open file, and a forked process shares the
parent's open files: a child forked while a thread of its parent held one
(a DataLoader worker forked during a fetch) would keep it held after that
thread let go, and every process of the node waiting on it would wait
until the child exits. So each descriptor `lock_file` opens is noted until
`unlock_file` closes it, and a forked child closes its copies of those
still open: it holds none of its parent's locks.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import threading

from filelock import FileLock

_guard = threading.Lock()  # a fork waits for a descriptor being opened or closed: none is half noted
_held: set[int] = set()


def node_lock(local_dest: str) -> FileLock:
    """The lock of `local_dest` (the destination's local path), in a per-user folder under the temp dir."""
    folder = os.path.join(tempfile.gettempdir(), f"air-export-locks-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    digest = hashlib.sha256(os.path.realpath(local_dest).encode()).hexdigest()[:32]
    return FileLock(os.path.join(folder, f"{digest}.lock"))


def lock_file(path: str, flags: int = os.O_RDWR | os.O_CREAT, *, wait: bool = True) -> int | None:
    """A descriptor of `path`, opened with `flags` (a new file 0600), holding its exclusive `flock`.

    Waits for the lock, or with `wait=False` returns None when another open
    file holds it. Close it with `unlock_file`.
    """
    with _guard:
        fd = os.open(path, flags, 0o600)
        _held.add(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        unlock_file(fd)
        return None
    except BaseException:
        unlock_file(fd)
        raise
    return fd


def unlock_file(fd: int) -> None:
    """Close a descriptor `lock_file` opened, which lets go of its lock."""
    with _guard:
        _held.discard(fd)
        os.close(fd)


def _close_inherited() -> None:
    for fd in _held:
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()
    _guard.release()


os.register_at_fork(before=_guard.acquire, after_in_parent=_guard.release, after_in_child=_close_inherited)
