"""Files-mode rows used on any node of a cluster, whichever node read them.

A row's `local_path` is the copy in the cache of the node that ran its read
task. On one machine that is every consumer's node; on a cluster a row often
reaches another one (the driver, an actor, a `streaming_split` consumer, a
map task that was not fused with the read). Its `bytes` are valid anywhere
(files mode carries them by default on a cluster), and `local_path(row)`
gives a path that is valid where it is called.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Mapping

from air_core.doors import Cache, FetchError, OptionError, volume


def local_path(row: Mapping[str, Any], *, cache_dir: str | None = None) -> str:
    """A path to the file of a files-mode row that is valid on the node that calls this.

    The row's own `local_path` when this node holds that copy (always on a
    single machine: one `exists` check); else this node's cached copy of the
    same version of the file, fetched from the volume the first time.

    Args:
        row: a row of `read_uc_volume(..., mode="files")` with its `path`
            column (the default `include_paths`).
        cache_dir: this node's cache folder (default: `air_core.default_dir()` here).

    Raises:
        OptionError: the row has no `path` column.
        FetchError: the file changed on the volume since the row was read.
    """
    copy = row["local_path"]
    if os.path.exists(copy):
        return copy
    path = row.get("path")
    if path is None:
        raise OptionError("local_path(row) needs the row's `path` column: read with include_paths=True")
    source = volume.parse(path).local
    st = os.stat(source)
    cache = _cache(cache_dir)
    # A copy's name is its version's key (path, size, mtime) whichever node made it: compare names.
    if os.path.basename(cache.entry_path(path, st.st_size, st.st_mtime_ns)) != os.path.basename(copy):
        raise FetchError(0, f"{path} changed on the volume since its row was read: read the dataset again")
    return cache.get(source, path, st.st_size, st.st_mtime_ns) or source  # a full cache: the volume file


@functools.lru_cache(maxsize=4)
def _cache(cache_dir: str | None) -> Cache:
    # One handle per process and folder: making one scans the folder.
    return Cache(cache_dir)
