"""What a front door reads: a volume folder (or a Delta table's export) resolved once, for every process.

`resolve_source` turns what a user gives (a path, globs, extensions, a mode, a Delta
table) into a `Source`: the folder actually read, its mode (which reader
reads it, see `air_core.read`: "files", a row per file; "parquet", the
tables' rows, row group by row group; "pack", a pack made by
`air_core.pack`, read as its files) and its listing (made once per job, see
`dist.list_once`). Every front door (`FileStream`, the `uc-volume` builder,
`UCVolumeDatasource`) resolves through here and reads through the source's
reader, so they accept and refuse the same things with the same words.

A `Source` is small when pickled: it carries the path, the selection and the
name of a file in the node cache folder that holds its listing, so spawned
DataLoader workers, Ray tasks and `@distributed` functions load the listing
there (once per process) instead of receiving it inline. A process on
another machine, where that file is not, lists the folder again and checks
that it found the same files. What a reader works out from the files (row
groups, a schema) is kept once per process too (`Source.held`).
"""

from __future__ import annotations

import copy
import glob
import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Literal, Mapping, Sequence, TypeVar

import numpy as np

from . import dist, options
from .packs import store as pack_store
from .io import volume
from .io.cache import Cache
from .errors import EmptyVolumeError, ManifestMismatchError, OptionError
from .io.listing import list_folder, list_records
from .manifest import Manifest
from .read import FORMATS, Reader, auto_suffixes, media_paths, reader_class, readers
from .read.media_paths import FolderMedia, NamedMedia

T = TypeVar("T")

Mode = Literal["auto", "files", "parquet", "pack", "json", "csv", "text", "webdataset"]
MODES = ("auto", "files", "parquet", "pack", "json", "csv", "text", "webdataset")
Globs = str | Sequence[str] | None
# Options of one format or another (see each reader's `takes`); None: not given.
FORMAT_OPTIONS = ("schema", "delimiter", "sample_by", "media", "media_dir")
# The records that name media (`media=`) mode="auto" finds, by their files' name endings: what they are called -> (their
# mode, the endings). JSON Lines and `.json` files (an array of objects, as LLaVA's) are both read in mode "json".
MEDIA_RECORDS = {"Parquet": ("parquet", auto_suffixes("parquet")), "JSON Lines": ("json", auto_suffixes("json")),
                 "JSON": ("json", (".json",)), "CSV": ("csv", auto_suffixes("csv"))}

_MEMO_SIZE = 4
_memo: dict[str, dict[str, Any]] = {}  # by fingerprint: the listing, row groups and schema this process holds


class Source:
    """A resolved source; make one with `resolve_source`.

    Attributes:
        path: the volume folder read (for a Delta table, its export's own folder;
            for a pack, its current generation's folder).
        mode: "files", "parquet" or "pack".
        given: the volume folder as the user named it (a pack's or an export's destination), for messages.
        cache_dir: the node cache folder given (None: the default), which keeps the listing for other processes.
        local: where `path` lies on the machine that resolved the source.
        fingerprint: the listing's fingerprint: two sources with the same one read the same files.
        options: the format options given (`schema`, `delimiter`, `sample_by`), for its reader.
        job: an id made anew for each source resolved (each job's, and each rank's), kept by its copies in
            other processes: what a reader learns of files it never listed (the versions of the media that
            records name) is kept under it, for this job alone.
    """

    def __init__(self, path: str | volume.VolumePath, mode: str, manifest: Manifest, listing: dict,
                 cache_dir: str | None, given: str | None = None, options: dict[str, Any] | None = None) -> None:
        folder = volume.parse(path)
        self.path, self.mode, self.fingerprint = folder.path, mode, manifest.fingerprint
        self.options = options or {}
        self.given = given or folder.path
        # Where the folder lies here, where it was resolved: a process elsewhere (a Ray task, an actor that
        # plans them) may not share this one's AIR_VOLUMES_ROOT.
        self.local = folder.local
        self._listing, self.cache_dir = listing, cache_dir
        self._listing_file: str | None = None
        self.job = os.urandom(8).hex()
        _remember(self.fingerprint, manifest=manifest)

    def __repr__(self) -> str:
        return f"Source({self.path!r}, mode={self.mode!r}, fingerprint={self.fingerprint!r})"

    def changed_since(self, saved: str) -> str:
        """Why a state saved over the listing `saved` (its fingerprint) does not resume over this one."""
        return (f"the state was saved over a different listing of {self.path} (fingerprint {saved} vs "
                f"{self.fingerprint}): the folder changed since; resume needs the same files")

    @property
    def reader(self) -> Reader:
        """The reader of this source's format: how every front door plans and reads it (records that name media:
        their format's reader, wrapped by `air_core.read.media.MediaReader`)."""
        if "media" not in self.options:
            return reader_class(self.mode)(self)
        from .read.media import MediaReader

        return MediaReader(self)

    @property
    def manifest(self) -> Manifest:
        """The listing every rank and worker plans from."""
        held = _memo.get(self.fingerprint, {}).get("manifest")
        if held is not None:
            return held
        if self._listing_file and os.path.exists(self._listing_file):
            manifest = Manifest.load(self._listing_file)
        else:  # another machine: the format's own listing (a pack's), or the folder listed again, the same files
            manifest = self.reader.own_listing()
            if manifest is None:
                manifest = _list(self.path, self._listing)
                if manifest.fingerprint != self.fingerprint:
                    raise ManifestMismatchError(
                        f"{self.path} changed since it was listed (fingerprint {self.fingerprint}, now "
                        f"{manifest.fingerprint}): every process must read the same files; make the dataset again"
                    )
        return _remember(self.fingerprint, manifest=manifest)["manifest"]

    def held(self, name: str, make: Callable[[], T]) -> T:
        """What this process worked out about the source under `name` (a reader's row groups, schema, ...):
        made once per process by `make`, and kept for later sources of the same listing."""
        # What is worked out depends on how the files are read, not only on which they are.
        key = f"{name}|{self.mode}|{sorted((k, repr(v)) for k, v in self.options.items())}"
        held = _memo.get(self.fingerprint, {})
        if key not in held:
            held = _remember(self.fingerprint, **{key: make()})
        return held[key]

    def with_options(self, **changed: Any) -> Source:
        """This source (the same listing and job) with format options `changed` (None: left out)."""
        view = copy.copy(self)
        view.options = {k: v for k, v in {**self.options, **changed}.items() if v is not None}
        return view

    def __getstate__(self) -> dict:
        if self._listing_file is None:
            self._listing_file = dist.save_listing(self.manifest, _listings(self.cache_dir))
        return dict(self.__dict__)


def resolve_source(
    path: str | None,
    *,
    mode: Mode = "auto",
    include: Globs = None,
    exclude: Globs = None,
    file_extensions: Sequence[str] | None = None,
    delta_table: str | None = None,
    delta_version: int | None = None,
    spark: Any = None,
    cache_dir: str | None = None,
    manifest: Manifest | None = None,
    schema: Any = None,
    delimiter: str | None = None,
    sample_by: str | None = None,
    media: Mapping[str, str] | None = None,
    media_dir: str | None = None,
) -> Source:
    """Resolve what to read: path and selection -> mode -> Delta export -> listing -> row groups.

    Args:
        path: a volume folder, `/Volumes/c/s/v/...` or `dbfs:/Volumes/...`;
            with `delta_table`, where the table is exported. The destination
            of an `export_delta` reads as its current export. None with
            `delta_table`: the table is read in place, from its own files,
            where that is exact (no deletion vectors, column mapping or
            partition columns; see `air_core.delta.in_place`).
        mode: "auto": a format's when every file has its extensions
            ("parquet": `.parquet`; "json": `.jsonl`, `.ndjson`; "csv":
            `.csv`, `.tsv`; the line formats also compressed, `.gz`, `.zst`;
            "webdataset": `.tar`), "files" when no file has a format's, an
            error for a mix. Or "files", "parquet", "pack", "json" (JSON
            Lines; a `.json` file's records are the objects of its top-level
            array, or its objects one after another, found by one pass over
            the file per node and read by ranges), "csv", "text" (a row per
            line of any file)
            or "webdataset" (a row per sample of each tar). A pack (see
            `air_core.pack`) reads as "pack" in modes "auto", "files" and
            "pack": a row per packed file; mode="parquet" reads its shards' rows.
        include: glob(s) of files to keep, relative to `path` (`*` crosses `/`).
        exclude: glob(s) of files to leave out.
        file_extensions: keep only files with these extensions (case-insensitive).
        delta_table, delta_version, spark: export this Delta table (at this
            version; through this Spark session when given) to `path` as
            Parquet, then read that export; an export of the same version is reused.
        cache_dir: the node cache folder that keeps the listing for other
            processes (default: `air_core.default_dir()`, where it is saved).
        manifest: a listing of `path` to use instead of listing it.
        schema: a table format's rows are read into this `pyarrow.Schema`
            (inferred from the files when not given).
        delimiter: CSV: the field delimiter (default: from the extension, a
            tab for `.tsv`, else a comma).
        sample_by: text: "line" (default), "paragraph" or "document" (a row per file).
        media: records that name media files: their columns that hold paths
            (one, or a list) -> each column's kind ("image", "audio", "video"
            or "file"). The folder's files of a records format (JSON Lines,
            `.json` files of an array of objects, CSV, Parquet; the one of
            `mode`, or under "auto" the one its files have) are the records, every other file is a medium and never a
            row: the listing lists the records alone (and never opens the
            media folder, where it lies inside `path`: records there are not
            read). Under "auto" without it, Hugging Face's folder convention is
            read as such: `metadata.jsonl`, `metadata.csv` or
            `metadata.parquet` files (one kind) among others, whose
            `file_name` / `<x>_file_name` (`file_names` / `<x>_file_names`:
            several) columns name media, each column named as HF names it;
            the listing reads the names of the files beside a metadata file,
            but the sizes of only the first of each extension in each folder.
        media_dir: the folder the media paths are relative to: a volume path,
            or a path relative to `path` (such as "images"); inside the same
            volume. Default: each records file's own folder.

    Raises:
        VolumePathError, EmptyVolumeError, OptionError, ParquetError, TableError:
            on the calling process, before any data is read.
    """
    options.choice("mode", mode, MODES)
    given_options = _format_options(schema, delimiter, sample_by, media, media_dir)
    if path is None:
        return _finish(_table_in_place(delta_table, delta_version, mode, manifest, spark, cache_dir, given_options))
    # Parsed once: the layers below take the VolumePath, and only a path that changes (an export's, a pack's
    # generation) is parsed again.
    folder = volume.parse(path)
    given = folder.path
    if delta_table is not None:
        folder, mode = _exported(delta_table, delta_version, spark, folder, mode, manifest), "parquet"
    elif delta_version is not None or spark is not None:
        raise OptionError("delta_version= and spark= go with delta_table=: name the table to export")
    elif manifest is None:
        folder, pack = _published(folder, mode)
        if pack is not None:
            return _finish(_pack_source(pack, folder.path, mode, include, exclude, file_extensions, cache_dir,
                                        given_options))
    if mode == "pack":
        raise OptionError(f"mode='pack' but {folder.path} is not a pack (it has no {pack_store.POINTER}): pack its "
                          f"files with `air-data pack SRC {folder.path}` or air_core.pack(), or read them with "
                          "mode='files'")
    if media_dir is not None:
        given_options["media_dir"] = _media_dir(folder, media_dir)
    listing = _selection(folder, mode, include, exclude, file_extensions, given_options)
    manifest = _listed_once(folder, listing, manifest, cache_dir)
    mode, manifest = _records_alone(folder, manifest, mode, listing, given_options)
    return _finish(Source(folder, _mode(manifest, mode), manifest, listing, cache_dir, given, given_options))


def _format_options(schema: Any, delimiter: str | None, sample_by: str | None, media: Mapping[str, str] | None,
                    media_dir: str | None) -> dict[str, Any]:
    """The format options given (None: not given), for the source's reader; `media_dir` is added once the folder
    it may be relative to is known."""
    given = {k: v for k, v in (("schema", schema), ("delimiter", delimiter), ("sample_by", sample_by)) if v is not None}
    if media is not None:
        given["media"] = NamedMedia.of(media)
    elif media_dir is not None:
        raise OptionError("media_dir= is where the media that records name lie: give media= too, naming the "
                          "columns that hold their paths")
    return given


def _table_in_place(delta_table: str | None, delta_version: int | None, mode: str, manifest: Manifest | None,
                    spark: Any, cache_dir: str | None, format_options: dict[str, Any]) -> Source:
    """The source of a Delta table read from its own files, where no folder is given."""
    if delta_table is None:
        raise OptionError("give a volume folder to read, or delta_table= to read a Delta table")
    if mode == "files" or manifest is not None:
        raise OptionError("delta_table= reads the table's rows: leave mode unset, or give mode='parquet'")
    if spark is not None:
        raise OptionError("spark= exports the table: give data_dir=, the volume folder to export it to")
    listing = {"table": delta_table, "version": delta_version}
    manifest = dist.list_once(lambda: _list(None, listing), _listings(cache_dir))
    return Source(manifest.root, "parquet", manifest, listing, cache_dir, options=format_options)


def _exported(delta_table: str, delta_version: int | None, spark: Any, folder: volume.VolumePath, mode: str,
              manifest: Manifest | None) -> volume.VolumePath:
    """The folder of the export of `delta_table` that `export_delta` makes into `folder`."""
    if mode == "files":
        raise OptionError("delta_table= exports the table's rows as Parquet: leave mode unset, "
                          "or give mode='parquet'")
    if manifest is not None:
        raise OptionError("manifest= lists a folder, delta_table= exports one: give one of them")
    from .delta import export_delta  # the `delta` extra

    # The export's own folder, not `folder`: it stays put while a newer export replaces the destination's.
    return volume.parse(export_delta(delta_table, folder.path, spark=spark, version=delta_version).path)


def _published(folder: volume.VolumePath, mode: str) -> tuple[volume.VolumePath, str | None]:
    """What `folder` reads as, where it is the destination of an export or of a pack: (the folder read, the pack
    to read as one, or None). An export's destination reads as its current export; a pack's as the pack, or under
    mode="parquet" as its current generation's shards."""
    from .delta.publication import current_export

    # Each probe is a round trip to the volume (a stat, or a HEAD over the Files API) and most folders are neither:
    # whether the folder itself is a pack is asked beside whether it is an export's destination, not after it.
    with ThreadPoolExecutor(1, thread_name_prefix="air-probe") as pool:
        packed_here = pool.submit(pack_store.pack_folder, folder)
        export = current_export(folder)
        if export is None:
            packed = packed_here.result()
    if export is not None:
        folder = volume.parse(export)
        packed = pack_store.pack_folder(folder)
    if packed is not None and mode in ("auto", "files", "pack"):
        return folder, packed
    if packed is not None and mode == "parquet":
        folder = volume.parse(packed)
    return folder, None


def _selection(folder: volume.VolumePath, mode: str, include: Globs, exclude: Globs,
               file_extensions: Sequence[str] | None, format_options: dict[str, Any]) -> dict[str, Any]:
    """Which files of `folder` to list (see `_list`)."""
    listing: dict[str, Any] = {"include": include, "exclude": exclude, "extensions": _extensions(file_extensions)}
    if "media" in format_options:  # the records alone are listed, and the media folder is never opened
        listing["media"] = _records_of(mode), _media_folder_glob(folder, format_options.get("media_dir")), \
            _records_label(mode)
    elif mode == "auto":  # HF's folder layout is listed without a stat of each medium
        listing["metadata"] = True
    return listing


def _listed_once(folder: volume.VolumePath, listing: dict[str, Any], manifest: Manifest | None,
                 cache_dir: str | None) -> Manifest:
    """The listing of `folder` every process plans from: made once per job, or the one given (`manifest=`),
    checked to be of this folder and the same on every rank."""
    if manifest is None:
        return dist.list_once(lambda: _list(folder, listing), _listings(cache_dir))
    if manifest.root != folder.path:
        raise OptionError(f"manifest= lists {manifest.root}, not {folder.path}")
    dist.check_same(manifest)
    return manifest


def _records_alone(folder: volume.VolumePath, manifest: Manifest, mode: str, listing: dict[str, Any],
                   format_options: dict[str, Any]) -> tuple[str, Manifest]:
    """(the mode, the listing read): where the files are records that name media, the records' mode and their
    files alone (kept in `listing` for other processes); else `mode` and `manifest` as they are."""
    records = _media_records(manifest, mode, format_options)
    if records is None:
        return mode, manifest
    mode, listing["records"] = records
    manifest = _records_only(manifest, listing["records"])
    if not len(manifest):
        raise EmptyVolumeError(f"{folder.path} holds no {reader_class(mode).label} files of records: media= "
                               "reads records (and the media they name); give the folder that holds them")
    return mode, manifest

def _finish(source: Source) -> Source:
    reader = source.reader
    for name in source.options:
        if name not in reader.takes:
            modes = [m for m, r in readers().items() if name in r.takes]
            raise OptionError(f"{name}= applies to mode {' or '.join(repr(m) for m in modes)}: {source.given} is "
                              f"read in mode {source.mode!r}")
    reader.validate()
    return source


def _list(path: volume.VolumePath | None, listing: dict) -> Manifest:
    """What `listing` says to list: a folder's files (its records alone, where they name media), or the data files
    of a Delta table read in place."""
    if "table" in listing:
        from .delta.in_place import table_files

        return table_files(listing["table"], listing["version"])
    include, exclude, extensions = listing["include"], listing["exclude"], listing["extensions"]
    if "media" in listing:
        suffixes, skip, label = listing["media"]
        try:
            found = list_folder(path, include=include, exclude=_globs(exclude) + skip,
                                extensions=_endings_of_both(extensions, suffixes))
        except EmptyVolumeError:
            raise EmptyVolumeError(f"{path.path} holds no {label} files of records: media= reads records (and the "
                                   "media they name); give the folder that holds them") from None
    elif "metadata" in listing:
        found = list_records(path, metadata=[f"metadata.{e}" for e in media_paths.METADATA], records=_record_endings(),
                             include=include, exclude=exclude, extensions=extensions)
    else:
        found = list_folder(path, include=include, exclude=exclude, extensions=extensions)
    return _records_only(found, listing["records"]) if "records" in listing else found


def _records_of(mode: str) -> tuple[str, ...]:
    """The endings of the names of the files of records that name media, read in `mode`."""
    if mode == "auto":
        return tuple(x for _, endings in MEDIA_RECORDS.values() for x in endings)
    if mode not in ("parquet", "json", "csv"):
        raise OptionError(f"media= reads records that name media, in mode 'json', 'csv' or 'parquet' (or 'auto'), "
                          f"not {mode!r}")
    return reader_class(mode).suffixes(given=True) or ()


def _records_label(mode: str) -> str:
    """The formats of records that name media read in `mode`, in messages."""
    if mode == "auto":
        return ", ".join(MEDIA_RECORDS).replace(", CSV", " or CSV")
    return reader_class(mode).label


def _record_endings() -> tuple[str, ...]:
    """The endings of every records format's files, as mode="auto" knows them."""
    return tuple(x for m in FORMATS for x in auto_suffixes(m))


def _media_folder_glob(folder: volume.VolumePath, media_dir: str | None) -> tuple[str, ...]:
    """An exclude glob of the media folder where it lies inside `folder` (its listing never opens it); else none."""
    if media_dir is None or not media_dir.startswith(folder.path + "/"):
        return ()
    return (glob.escape(media_dir[len(folder.path) + 1:]) + "/*",)


def _globs(globs: Globs) -> tuple[str, ...]:
    if globs is None:
        return ()
    return (globs,) if isinstance(globs, str) else tuple(globs)


def _endings_of_both(extensions: Sequence[str] | None, suffixes: Sequence[str]) -> tuple[str, ...]:
    """The extensions (no leading dot) a name must end with to end with one of `extensions` (None: any) and one of
    `suffixes` (with their dots): of two endings, where one ends the other, the longer."""
    if extensions is None:
        return tuple(x.lstrip(".") for x in suffixes)
    given = ["." + e for e in extensions]
    return tuple(dict.fromkeys((a if len(a) >= len(b) else b).lstrip(".") for a in given for b in suffixes
                               if a.endswith(b) or b.endswith(a)))


def _media_dir(folder: volume.VolumePath, media_dir: str) -> str:
    """`media_dir=` as a volume path: a volume path, or relative to `folder`; inside `folder`'s volume."""
    if not isinstance(media_dir, str) or not media_dir:
        raise OptionError(f"media_dir={media_dir!r}: give the folder the media paths are relative to, a volume path "
                          "or a path relative to the data folder (such as 'images')")
    if media_dir.startswith(("/", "dbfs:")):
        path = volume.parse(media_dir).path
    else:
        path = posixpath.normpath(f"{folder.path}/{media_dir}")
    if path != folder.volume and not path.startswith(folder.volume + "/"):
        raise OptionError(f"media_dir={media_dir!r} lies outside the volume {folder.volume} of {folder.path}: the "
                          "media must lie in the records' volume")
    return path


def _media_records(manifest: Manifest, mode: str, format_options: dict[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """(the records' mode, the endings of their files' names) where the folder holds records that name media
    (`media=` given, or under mode="auto" HF's folder convention, whose media spec it adds to `format_options`);
    None: it does not."""
    if "media" in format_options:
        if mode == "auto":
            found = [name for name, (_, endings) in MEDIA_RECORDS.items() if _having(manifest, endings).any()]
            if len(found) != 1:
                kinds = " and ".join(found) or "no records"
                raise OptionError(f"media= reads records that name media, but {manifest.root} holds {kinds} files: "
                                  "give the records' format with mode='json', 'csv' or 'parquet', or choose the "
                                  "records files with include=")
            return MEDIA_RECORDS[found[0]]
        return mode, _records_of(mode)
    if mode != "auto":
        return None
    found = {ext: m for ext, m in media_paths.METADATA.items()
             if _records_only(manifest, (f"/metadata.{ext}",), subset=False).any()}
    if not found:
        return None
    if len(found) > 1:
        raise OptionError(f"{manifest.root} holds metadata files of {len(found)} kinds "
                          f"({', '.join(f'metadata.{e}' for e in found)}): a folder dataset has one kind; leave the "
                          "others out with exclude=")
    ext, records_mode = next(iter(found.items()))
    names = (f"/metadata.{ext}",)
    others = ~_records_only(manifest, names, subset=False)
    if not (others & ~_having(manifest, auto_suffixes(records_mode))).any():
        return None  # records alone: a folder of the format, read as it is
    counts = {kind: int((others & manifest.paths.endswith(exts)).sum()) for kind, exts in media_paths.EXTENSIONS.items()}
    format_options["media"] = FolderMedia(media_paths.kind_of_files(counts))
    return records_mode, names


def _records_only(manifest: Manifest, endings: tuple[str, ...], *, subset: bool = True) -> Any:
    """The listing of the files of `manifest` whose names end with one of `endings` (one starting with `/`: the
    whole name, at any depth), as a listing of its own, with its own fingerprint; `subset=False`: a mask of them."""
    keep = manifest.paths.endswith(tuple(e.lstrip("/") for e in endings))
    names = {e[1:].lower() for e in endings if e.startswith("/")}
    if names:  # not a file that only ends like one (`train_metadata.jsonl`)
        for i in np.flatnonzero(keep).tolist():
            keep[i] = manifest.paths[i].rsplit("/", 1)[-1].lower() in names
    if not subset:
        return keep
    return Manifest.from_rows(manifest.root, manifest.rows(np.flatnonzero(keep)))


def _pack_source(folder: str, given: str, mode: str, include: Globs, exclude: Globs,
                 file_extensions: Sequence[str] | None, cache_dir: str | None,
                 format_options: dict[str, Any]) -> Source:
    if include is not None or exclude is not None or file_extensions is not None:
        raise OptionError(f"{folder} is a pack, read whole: choose the files when packing "
                          "(air-data pack --include/--exclude), or read the loose folder")
    from .packs import read as pack_read

    generation = pack_store.load_generation(folder)
    if generation.media and mode == "files":
        raise OptionError(f"mode='files' reads a row per file, but {given} is a pack of records packed with their "
                          "media, read as the records' rows: read it in mode 'auto' (RowStream, "
                          "UCVolumeDataset(mode='rows'))")
    manifest = dist.list_once(lambda: pack_read.index(generation, cache_dir), _listings(cache_dir))
    source = Source(folder, "pack", manifest, {}, cache_dir, given, format_options)
    source.held("generation", lambda: generation)
    return source


def check_columns(columns: Any, names: Sequence[str]) -> None:
    """Refuse a `columns=` selection that is not a non-empty list of some of `names`."""
    if (isinstance(columns, str) or not isinstance(columns, (list, tuple)) or not columns
            or any(c not in names for c in columns)):
        raise OptionError(f"columns={columns!r}: give a non-empty list of the rows' columns, {list(names)}")


def _extensions(extensions: Sequence[str] | None) -> tuple[str, ...] | None:
    if extensions is None:
        return None
    if isinstance(extensions, str):
        extensions = [extensions]
    return tuple(e.lower().lstrip(".") for e in extensions)


def _mode(manifest: Manifest, mode: str) -> str:
    """The mode to read in: the one given, checked against the files' names, or the one their names say."""
    if mode == "files":
        return "files"
    if mode != "auto":
        reader = reader_class(mode)
        suffixes = reader.suffixes(given=True)
        if suffixes is not None:
            ours = _having(manifest, suffixes)
            if not ours.all():
                other = manifest.paths[int(ours.argmin())]
                raise OptionError(f"mode={mode!r} but {manifest.root} holds other files ({other}): "
                                  f"{_select(reader, suffixes)}")
        return mode
    for name in FORMATS:
        suffixes = auto_suffixes(name)
        if not suffixes:
            continue
        ours = _having(manifest, suffixes)
        if ours.all():
            return name
        if ours.any():
            reader = reader_class(name)
            first, other = manifest.paths[int(ours.argmax())], manifest.paths[int(ours.argmin())]
            raise OptionError(f"{manifest.root} mixes {reader.label} files ({first}) with other files ({other}): "
                              f"{_select(reader, suffixes)}, or read every file as a row with mode='files'")
    return "files"


def _having(manifest: Manifest, suffixes: Sequence[str]) -> np.ndarray:
    """Which files' names end with one of `suffixes`."""
    return manifest.paths.endswith(tuple(suffixes))


def _select(reader: type[Reader], suffixes: Sequence[str]) -> str:
    exts = [s.lstrip(".") for s in suffixes]
    return f"select the {reader.label} files with include='*{suffixes[0]}' or file_extensions={exts}"


def _remember(fingerprint: str, **found: Any) -> dict[str, Any]:
    held = _memo.pop(fingerprint, {})
    held.update(found)
    _memo[fingerprint] = held
    while len(_memo) > _MEMO_SIZE:
        del _memo[next(iter(_memo))]
    return held


def _listings(cache_dir: str | None) -> str:
    """The folder of saved listings in the node cache (made private by `Cache`)."""
    return os.path.join(Cache(cache_dir).root, "manifests")


__all__ = ["FORMAT_OPTIONS", "MODES", "Mode", "Source", "check_columns", "resolve_source"]
