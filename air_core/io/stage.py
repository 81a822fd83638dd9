"""Copy a volume folder to local disk in parallel: the `find | xargs -P 256 cp --parents` recipe.

Each file is written to a hidden temp name (`.name.<pid>.part`, as rsync does)
and renamed, with the source's mtime, so a rerun skips what is already there
and an interrupted run leaves no torn file under a name a reader would take.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from . import transport, volume
from .cache import copy_into
from ..errors import OptionError
from .fetch import ordered_map, retrying
from .listing import list_folder
from ..manifest import Manifest

if TYPE_CHECKING:
    from .files_api import FilesApi


@dataclass(frozen=True)
class StageResult:
    """What `stage` did: files copied, files already up to date, bytes copied."""

    copied: int
    skipped: int
    bytes: int


def stage(
    src: str,
    dst: str,
    *,
    threads: int = 64,
    include: str | None = None,
    exclude: str | None = None,
    on_file: Callable[[int], None] | None = None,
) -> StageResult:
    """Copy every file under the volume folder `src` to the local folder `dst`, keeping relative paths.

    Args:
        threads: concurrent copies (reads in flight decide small-file speed).
        include, exclude: globs relative to `src`, as in `list_folder`.
        on_file: called with each file's size as it completes (progress bars).
    """
    if threads < 1:
        raise OptionError(f"-j/threads={threads}: give at least 1")
    manifest = list_folder(src, include=include, exclude=exclude)
    local_root = volume.parse(src).local
    remote = transport.remote(local_root)
    dst = os.path.abspath(dst)
    if os.path.realpath(dst).startswith(os.path.realpath(local_root) + os.sep):
        raise OptionError(f"destination {dst} is inside the source {src}: choose a folder outside it")

    def copy(i: int) -> int:
        rel = manifest.paths[i]
        target = os.path.join(dst, rel)
        try:
            st = os.stat(target)
            if st.st_size == manifest.sizes[i] and st.st_mtime_ns == manifest.mtimes[i]:
                return -1
        except FileNotFoundError:
            pass
        retrying(lambda: _copy_one(manifest, i, f"{local_root}/{rel}", target, remote), manifest.volume_path(i))
        return int(manifest.sizes[i])

    copied = skipped = nbytes = 0
    for size in ordered_map(copy, ((i, int(manifest.sizes[i])) for i in range(len(manifest))),
                            threads=threads, max_ahead=4 * threads, max_bytes=1 << 30):
        if size < 0:
            skipped += 1
        else:
            copied += 1
            nbytes += size
        if on_file:
            on_file(max(size, 0))
    return StageResult(copied, skipped, nbytes)


def _copy_one(manifest: Manifest, i: int, source: str, target: str, remote: FilesApi | None) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        copy_into(source, manifest.volume_path(i), int(manifest.sizes[i]), int(manifest.mtimes[i]), fd,
                  remote=remote)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.utime(tmp, ns=(int(manifest.mtimes[i]), int(manifest.mtimes[i])))
    os.replace(tmp, target)
