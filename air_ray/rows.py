"""Files-mode rows used on any node of a cluster, whichever node read them.

A row's `local_path` is the copy in the cache of the node that ran its read
task. On one machine that is every consumer's node; on a cluster a row often
reaches another one (the driver, an actor, a `streaming_split` consumer, a
map task that was not fused with the read). Its `bytes` are valid anywhere
(files mode carries them by default on a cluster), and `local_path(row)`
gives a path that is valid where it is called.
"""

from __future__ import annotations

import errno
import functools
import os
from typing import Any, Mapping

from air_core.doors import Cache, FetchError, OptionError, default_dir, transport, volume


def local_path(row: Mapping[str, Any], *, cache_dir: str | None = None) -> str:
    """A path to the file of a files-mode row that is valid on the node that calls this.

    The row's own `local_path` when this node holds that copy (always on a
    single machine: one `exists` check); else this node's cached copy of the
    same version of the file, fetched from the volume the first time, over
    FUSE or the Files API as this process reaches the file's volume
    (`air_core.doors.transport`). Past a full cache, the volume's file itself
    over FUSE.

    Args:
        row: a row of `read_uc_volume(..., mode="files")` with its `path`
            column (the default `include_paths`).
        cache_dir: this node's cache folder (default: `air_core.default_dir()` here).

    Raises:
        OptionError: the row has no `path` column.
        FetchError: the file changed on the volume since the row was read; or,
            over the Files API, this node's cache is full, and no local file
            holds the volume's file.
    """
    copy = row["local_path"]
    if os.path.exists(copy):
        return copy
    path = row.get("path")
    if path is None:
        raise OptionError("local_path(row) needs the row's `path` column: read with include_paths=True")
    source = volume.parse(path).local
    size, mtime_ns = transport.stat(source)
    cache = _cache(cache_dir or default_dir())
    # A copy's name is its version's key (path, size, mtime) whichever node made it: compare names.
    if os.path.basename(cache.entry_path(path, size, mtime_ns)) != os.path.basename(copy):
        raise FetchError(0, f"{path} changed on the volume since its row was read: read the dataset again")
    got = cache.get(source, path, size, mtime_ns)
    if got is not None:
        return got
    if transport.remote(source) is None:
        return source  # a full cache: the volume's file, on the mount
    raise FetchError(errno.ENOSPC, f"{path}: the node cache {cache.root} is full, and over the Files API no local "
                                   "file holds the volume's file: free room there (air-data cache prune), or use "
                                   "the row's `bytes`")


@functools.lru_cache(maxsize=4)
def _cache(root: str) -> Cache:
    # One handle per process and folder: making one scans the folder.
    return Cache(root)
