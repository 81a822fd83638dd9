"""`pack`: a volume folder packed into Parquet shards, as its loose files or as the records that name media it holds.

Which of the two a folder is, the readers decide (`resolve_source`, as every
front door reads it); this module sits above them and above `air_core.packs`,
which writes either kind without knowing how records are read.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from . import options
from .errors import OptionError
from .io import volume
from .io.files import ON_ERRORS, OnError
from .io.listing import list_folder
from .manifest import Manifest
from .packs import write
from .read.media_paths import METADATA
from .sizes import parse_size
from .source import Source, resolve_source


def pack(
    src: str,
    dst: str,
    *,
    shard_size: int | str = write.DEFAULT_SHARD_SIZE,
    row_group_size: int | str = write.DEFAULT_ROW_GROUP_SIZE,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    threads: int = write.DEFAULT_THREADS,
    progress: bool = False,
    media: Mapping[str, str] | None = None,
    media_dir: str | None = None,
    on_error: OnError = "raise",
) -> write.PackResult:
    """Pack the files under the volume folder `src` into Parquet shards under the volume folder `dst`.

    A folder that readers read as records naming media (`media=`, or under
    no option HF's folder convention: `metadata.jsonl`, `.csv` or `.parquet`
    beside the media) is packed as those records, each with its media's
    bytes (see `air_core.packs.records`), and every front door reads the
    pack as it reads the folder: the same rows, the media fetched with
    their records' row groups.

    Packing an unchanged source again writes nothing. A run killed at any
    point leaves the previous generation served, and running it again keeps
    the shards it finished. A changed source (a file added, removed or
    modified) is packed into a new generation, which readers switch to once
    it is complete; the one it replaces is removed by a pack an hour later.

    Args:
        src: the volume folder of files to pack, `/Volumes/<catalog>/<schema>/<volume>/...`.
        dst: the volume folder to publish the pack at: new, empty, or an earlier pack's.
        shard_size: about how big each shard is (bytes, or text such as "1GiB").
        row_group_size: about how many bytes of files each row group holds.
        include, exclude: glob(s) of files to pack / leave out, relative to `src`.
        threads: files read from `src` at once (reads in flight decide small-file speed).
        progress: show a progress bar of the bytes packed.
        media, media_dir: records that name media, as a reader takes them (`air_core.resolve_source`): the
            records' columns that hold paths -> their kinds, and the folder the paths are relative to.
        on_error: records that name media: "raise" (default) for a record whose medium is missing (or outside
            the volume, or an image that does not open), or "skip" to leave it out with a warning
            (`PackResult.left_out` says where each lay).

    Raises:
        VolumePathError: a malformed or missing path, `dst` inside `src` (or
            `src` inside `dst`), or `dst` holding something other than a pack.
        EmptyVolumeError: `src` holds no file (that the globs select).
        OptionError: a size or thread count out of range, or `media=` that does not fit the records.
        MediaError: a record names a medium that cannot be read (with on_error="raise"), naming the records
            file, the record's line (or row) and the path.
        FetchError: a file that stays unreadable, or changed while being packed.
    """
    options.whole("threads", threads, low=1)
    options.choice("on_error", on_error, ON_ERRORS)
    s, d = volume.parse(src), volume.parse(dst)
    write.check_places(s, d)
    manifest = list_folder(s.path, include=include, exclude=exclude)
    settings = {"shard_size": parse_size(shard_size), "row_group_size": parse_size(row_group_size),
                "include": include, "exclude": exclude}
    found = _records(s.path, manifest, include=include, exclude=exclude, media=media, media_dir=media_dir)
    if found is not None:
        return write.pack_records(found, manifest, d, settings, threads=threads, on_error=on_error,
                                  progress=progress)
    if on_error != "raise":
        raise OptionError(f"on_error={on_error!r} leaves out records whose media cannot be read, but {s.path} holds "
                          "no records that name media: its files are packed whole; leave on_error unset")
    return write.pack_files(s, d, manifest, settings, threads=threads, progress=progress)


def _records(src: str, listing: Manifest, *, include: Any, exclude: Any, media: Mapping[str, str] | None,
                   media_dir: str | None) -> Source | None:
    """The records naming media that `src` (listed: `listing`) holds, resolved as a reader resolves them
    (`media=` and `media_dir=` given, or HF's folder convention under mode "auto"); None: a folder of files.

    Raises:
        OptionError: `media=` or `media_dir=` that do not fit the folder, in a reader's words.
    """
    if media is None and media_dir is None and not _has_metadata(listing):
        return None  # no records to name media: nothing to resolve (nor a records file to open)
    source = resolve_source(src, include=include, exclude=exclude, manifest=listing, media=media, media_dir=media_dir)
    return source if "media" in source.options else None


def _has_metadata(listing: Manifest) -> bool:
    names = tuple(f"metadata.{e}" for e in METADATA)
    return bool(listing.paths.endswith(names).any())


__all__ = ["pack"]
