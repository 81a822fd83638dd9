"""A lock on this node's local disk for one destination on a volume.

A volume has no locks, a local disk does: the writers of one destination on
one node (`export_delta`'s publication, `pack`'s writer) take turns under it,
so the second finds the first's work done instead of writing it again.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

from filelock import FileLock


def node_lock(local_dest: str) -> FileLock:
    """The lock of `local_dest` (the destination's local path), in a per-user folder under the temp dir."""
    folder = os.path.join(tempfile.gettempdir(), f"air-export-locks-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    digest = hashlib.sha256(os.path.realpath(local_dest).encode()).hexdigest()[:32]
    return FileLock(os.path.join(folder, f"{digest}.lock"))
