"""Delta table -> Parquet files on a volume, published atomically, once per table version.

Reading. Without Spark the table is read through its log with `deltalake`
(no JVM): removed files are left out, partition columns become real columns,
and deletion vectors (or column mapping) are applied by deltalake's own
engine. Plain tables are read with `pyarrow.dataset` over a
`SubTreeFileSystem`, never through deltalake's Python file system, whose
threads can abort the interpreter at exit ("terminate called without an
active exception", delta-rs #2184). With a Spark session (classic or Spark
Connect) the table is read by Spark and written by its executors.

Publication. `dest` is a symbolic link, and each export is its own folder
beside it, in a hidden home that listings skip:

    dest -> .dest.exports/v7-3f9a1c2b0d4e        what readers list
    .dest.exports/v7-3f9a1c2b0d4e/part-*.parquet  this export
    .dest.exports/v7-3f9a1c2b0d4e/_air_export.json  its marker (table, version, files, rows)
    .dest.exports/v6-91b0c2d3e4f5/               the previous export, kept for readers still on it

A new export is written into a fresh folder, its marker last, then the link
is replaced by `rename(2)`, which POSIX makes atomic: a reader resolves
`dest` to one complete export or the other, never to a half-written one, and
a process killed at any point leaves the old link, and so the old export,
served. Leftovers of a killed export are removed by the next one. Readers
that list `dest` and open files later should list `ExportResult.path` (the
export's own folder) instead: it stays put until the export after next,
whereas `dest` may move on to a newer export in between (file names are
unique per export, so a stale listing of `dest` fails to open rather than
mixing two versions). Exporters of one destination take turns under a file
lock, and the second finds the version already exported. The destination's
file system must support symbolic links: on one that refuses them, an export
fails before it writes anything.
"""

from __future__ import annotations

import json
import os
import posixpath
import secrets
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from tqdm import tqdm

from . import volume
from .errors import AirError, OptionError, VolumePathError

MARKER = "_air_export.json"
ROW_GROUP_BYTES = 16 << 20
ROW_GROUPS_PER_FILE = 8
_MIN_GROUP_ROWS, _MAX_GROUP_ROWS = 64, 1 << 20
_LOCK = ".lock"


class TableError(AirError, ValueError):
    """A table that cannot be exported: not a Delta table, a version it does not have, or unreadable data."""


@dataclass(frozen=True)
class ExportResult:
    """What an export holds.

    Attributes:
        dest: the volume path readers list (a link to the current export).
        path: the volume path of this export's own folder; it stays in place
            while the export is current or previous.
        table: the table as identified (a volume path, a URI or a table name).
        version: the table version exported (None when Spark cannot tell it).
        files: the Parquet files, relative to `path`, sorted.
        rows: rows in all files.
        skipped: True when `dest` already held this export and nothing was written.
    """

    dest: str
    path: str
    table: str
    version: int | None
    files: tuple[str, ...]
    rows: int
    skipped: bool


def export_delta(
    table: str,
    dest: str,
    *,
    spark: Any = None,
    version: int | None = None,
    rows_per_file: int | None = None,
    rows_per_row_group: int | None = None,
    progress: bool = False,
) -> ExportResult:
    """Export a table to Parquet files under the volume path `dest`, atomically and once per version.

    Args:
        table: without `spark`, a Delta table: a volume path (`/Volumes/...`),
            a local path or a URI deltalake reads; with `spark`, a table name
            for `spark.table`.
        dest: a volume path; it becomes a link to the current export (see the
            module docstring). It must not exist yet, or be an empty folder, or
            hold an earlier export.
        spark: a SparkSession (classic or Spark Connect) that reads and writes
            instead of deltalake. It must see `dest` at the same path as this
            process (on Databricks, or a local session off it). The export is
            identified by the table name, its Delta version when the catalog
            tells it (`DESCRIBE HISTORY`), and a digest of its input files.
        version: the table version to export (default: the latest). With
            Spark it is read with `versionAsOf`, which needs a Delta table.
        rows_per_file: rows per Parquet file (default: eight row groups).
        rows_per_row_group: rows per row group, the unit streaming readers
            split a table by (default: about 16 MiB of the table's Parquet
            data per group). Spark sizes row groups itself (16 MiB), so this
            is for the deltalake path only.
        progress: show a progress bar of rows written (deltalake path).

    Returns:
        What `dest` now holds; `skipped=True` when it already held this
        table version with the same layout, in which case nothing was written.

    Raises:
        TableError: not a Delta table, a version it does not have, or a data
            file its log lists that is missing or unreadable.
        VolumePathError: `dest` is malformed, inside the table, something
            other than an earlier export, or not writable.
        OptionError: a size or version out of range.
    """
    for name, value in (("rows_per_file", rows_per_file), ("rows_per_row_group", rows_per_row_group),
                        ("version", version)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0
                                  or (value == 0 and name != "version")):
            raise OptionError(f"{name}={value!r}: give a {'non-negative' if name == 'version' else 'positive'} "
                              "integer, or leave it unset")
    target = _Dest.of(dest)
    if spark is None:
        dt, identity = _open_delta(table, version)
        target.check_outside(_local_path(dt.table_uri))
        logged_rows, logged_bytes = _log_stats(dt)
        files_per, group = layout(logged_bytes / logged_rows if logged_rows else None, rows_per_file,
                                  rows_per_row_group)
        key = {"engine": "deltalake", "table": identity, "table_id": dt.metadata().id, "version": dt.version(),
               "rows_per_file": files_per, "rows_per_row_group": group}
        write: Callable[[str, str], None] = lambda folder, token: _write_delta(
            dt, identity, folder, token, files_per, group, progress, logged_rows)
    else:
        from . import spark_export

        if rows_per_row_group is not None:
            raise OptionError("rows_per_row_group applies to the deltalake path: Spark sizes row groups "
                              "in bytes itself; leave it unset with spark=")
        df, key = spark_export.snapshot(spark, table, version)
        key["rows_per_file"] = rows_per_file
        write = lambda folder, token: spark_export.write(df, folder, rows_per_file)
    return target.publish(key, write)


def layout(row_bytes: float | None, rows_per_file: int | None = None,
           rows_per_row_group: int | None = None) -> tuple[int, int]:
    """(rows per file, rows per row group): the given ones, else sized from bytes per row. Pure.

    A row group holds about `ROW_GROUP_BYTES` of Parquet data (streaming
    readers fetch and split by row group), a file `ROW_GROUPS_PER_FILE`
    groups (one open per file; the cache holds whole files).
    """
    if rows_per_row_group is None:
        guess = ROW_GROUP_BYTES / row_bytes if row_bytes else 128 * 1024
        rows_per_row_group = int(min(max(guess, _MIN_GROUP_ROWS), _MAX_GROUP_ROWS))
        if rows_per_file is not None:
            rows_per_row_group = min(rows_per_row_group, rows_per_file)
    if rows_per_file is None:
        rows_per_file = rows_per_row_group * ROW_GROUPS_PER_FILE
    if rows_per_file < rows_per_row_group:
        raise OptionError(f"rows_per_file={rows_per_file} is below rows_per_row_group={rows_per_row_group}: "
                          "a file holds whole row groups; raise rows_per_file or lower rows_per_row_group")
    return rows_per_file, rows_per_row_group


# -- reading with deltalake ---------------------------------------------------------------------------

def _on_volume(path: str) -> bool:
    return path.startswith(("/Volumes/", "dbfs:/Volumes/"))


def _open_delta(table: str, version: int | None):
    """(DeltaTable at `version`, the table's identity: its volume path or the path given)."""
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError
    except ImportError:
        raise ImportError("exporting a Delta table without Spark needs the deltalake package: "
                          "pip install 'air-uc-volume[delta]'") from None

    identity, uri = table, table
    if _on_volume(table):
        vp = volume.parse(table)
        identity, uri = vp.path, vp.local
    local = _local_path(uri)
    if local is not None and not os.path.exists(local):
        raise TableError(f"{table} does not exist: give the folder of a Delta table (the one holding _delta_log/)")
    try:
        dt = DeltaTable(uri)
    except TableNotFoundError as e:
        raise TableError(f"{table} is not a Delta table ({_first_line(e)}): give the table's root folder, "
                         "the one holding _delta_log/ with its commits") from None
    except DeltaError as e:
        raise TableError(f"{table} could not be opened as a Delta table: {_first_line(e)}") from None
    latest = dt.version()
    if version is not None and version != latest:
        if version > latest:
            raise TableError(f"{table} has no version {version}: its latest version is {latest}; "
                             "leave version unset to export the latest")
        try:
            dt.load_as_version(version)
        except DeltaError as e:
            raise TableError(f"version {version} of {table} can no longer be read ({_first_line(e)}): its log "
                             f"entries were cleaned up; export a later version (latest: {latest})") from None
    return dt, identity


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _local_path(uri: str) -> str | None:
    """The local path of a table location, or None for a remote one."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    return uri if parsed.scheme == "" or len(parsed.scheme) == 1 else None


def _log_stats(dt) -> tuple[int | None, int]:
    """(rows, Parquet bytes) of the loaded version's files, from the log; rows None without statistics."""
    adds = pa.table(dt.get_add_actions())
    rows = adds.column("num_records")
    total_bytes = pc.sum(adds.column("size_bytes")).as_py() or 0
    return (None if rows.null_count else pc.sum(rows).as_py() or 0), total_bytes


def _needs_engine(dt) -> bool:
    """Whether the table needs deltalake's engine: deletion vectors or column mapping."""
    features = set(dt.protocol().reader_features or ())
    mapping = dt.metadata().configuration.get("delta.columnMapping.mode", "none")
    return bool(features & {"deletionVectors", "columnMapping"}) or mapping != "none"


def _reader(dt) -> pa.RecordBatchReader:
    """The table's rows at its loaded version, with the table's schema."""
    schema = pa.schema(dt.schema().to_arrow())
    if _needs_engine(dt):
        return pa.RecordBatchReader.from_stream(dt.scan()).cast(schema)
    fs, root = pafs.FileSystem.from_uri(dt.table_uri)
    return dt.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, fs)).scanner().to_reader()


def _write_delta(dt, table: str, folder: str, token: str, rows_per_file: int, rows_per_row_group: int,
                 progress: bool, expected_rows: int | None) -> None:
    """Write the table's rows into `folder` (created), as part-<token>-<i>.parquet files."""
    with _read_errors_as_table_error(dt, table):
        reader = _reader(dt)
    with tqdm(total=expected_rows, unit="rows", unit_scale=True, disable=not progress, desc="export") as bar:
        def counted():
            # Only reading runs inside: the writer's errors are raised in write_dataset, not here.
            with _read_errors_as_table_error(dt, table):
                for batch in reader:
                    bar.update(batch.num_rows)
                    yield batch

        pads.write_dataset(
            pa.RecordBatchReader.from_batches(reader.schema, counted()), folder, format="parquet",
            basename_template=f"part-{token}-{{i}}.parquet", max_rows_per_file=rows_per_file,
            min_rows_per_group=rows_per_row_group, max_rows_per_group=rows_per_row_group,
            existing_data_behavior="error")
    if not _parquet_names(folder):  # an empty table still exports its schema
        os.makedirs(folder, exist_ok=True)
        pq.write_table(reader.schema.empty_table(), os.path.join(folder, f"part-{token}-0.parquet"))


@contextmanager
def _read_errors_as_table_error(dt, table: str) -> Iterator[None]:
    """A failure to read the table's data files, raised as a `TableError` that says what to do."""
    from deltalake.exceptions import DeltaError

    try:
        yield
    except (OSError, pa.ArrowException, DeltaError) as e:
        raise TableError(
            f"version {dt.version()} of {table} cannot be read: {_first_line(e)}. A data file its log "
            "lists is missing or unreadable (removed by VACUUM or by hand?): export a later version, or "
            "restore the file"
        ) from None


# -- publication --------------------------------------------------------------------------------------

def _parquet_names(folder: str) -> list[str]:
    if not os.path.isdir(folder):
        return []
    return sorted(n for n in os.listdir(folder) if n.endswith(".parquet") and n[0] not in "._")


@dataclass(frozen=True)
class _Dest:
    """A destination: the link readers list and the hidden home of its exports."""

    vp: volume.VolumePath
    home_name: str

    @classmethod
    def of(cls, dest: str) -> "_Dest":
        vp = volume.parse(dest)
        if vp.path == vp.volume:
            raise VolumePathError(f"{vp.path} is a volume's root: export into a folder inside it, "
                                  f"e.g. {vp.volume}/exports/<name>")
        name = posixpath.basename(vp.path)
        if name[0] in "._":
            raise VolumePathError(f"{vp.path}: a destination starting with '.' or '_' is skipped by listings; "
                                  "choose a name that readers will see")
        return cls(vp, f".{name}.exports")

    @property
    def link(self) -> str:
        return self.vp.local

    @property
    def home(self) -> str:
        return os.path.join(os.path.dirname(self.vp.local), self.home_name)

    def volume_path(self, tag: str) -> str:
        return f"{posixpath.dirname(self.vp.path)}/{self.home_name}/{tag}"

    def check_outside(self, table_root: str | None) -> None:
        """Refuse a destination inside the table (it would be written into the table's folder)."""
        if table_root is None:
            return
        root = os.path.realpath(table_root).rstrip("/")
        here = os.path.join(os.path.realpath(os.path.dirname(self.link)), os.path.basename(self.link))
        if here == root or here.startswith(root + "/"):
            raise VolumePathError(f"{self.vp.path} is inside the table {table_root}: exporting there would "
                                  "write into the table's own folder; choose a destination outside it")

    def current(self) -> dict | None:
        """The marker of the export `dest` serves, or None when there is none yet."""
        link = self.link
        if not os.path.lexists(link):
            return None
        if os.path.islink(link):
            target = os.readlink(link)
            if target.startswith(self.home_name + "/"):
                try:
                    with open(os.path.join(self.home, target[len(self.home_name) + 1:], MARKER)) as f:
                        return json.load(f)
                except FileNotFoundError:
                    return None
        elif os.path.isdir(link) and not os.listdir(link):
            return None
        raise VolumePathError(f"{self.vp.path} already exists and is not an export made by export_delta; "
                              "remove it or choose another destination")

    def result(self, marker: dict, skipped: bool) -> ExportResult:
        return ExportResult(dest=self.vp.path, path=self.volume_path(marker["tag"]), table=marker["key"]["table"],
                            version=marker["key"]["version"], files=tuple(marker["files"]), rows=marker["rows"],
                            skipped=skipped)

    def publish(self, key: dict, write: Callable[[str, str], None]) -> ExportResult:
        """Write the export for `key` into a fresh folder and swap the link to it, unless it is current."""
        current = self.current()
        if current is not None and current["key"] == key:
            return self.result(current, skipped=True)
        from filelock import FileLock

        if not os.path.isdir(self.vp.local_volume):
            raise VolumePathError(f"the volume {self.vp.volume} does not exist: create it, or check the "
                                  f"catalog, schema and volume names in {self.vp.path}")
        try:
            os.makedirs(self.home, exist_ok=True)
            volume.check_inside(self.vp, self.home)
            lock = FileLock(os.path.join(self.home, _LOCK))
            lock.acquire()
        except OSError as e:
            raise VolumePathError(f"cannot write an export beside {self.vp.path}: {e.strerror or e}; "
                                  "choose a destination you can write to") from None
        try:
            current = self.current()  # another process may have exported while this one waited
            if current is not None and current["key"] == key:
                return self.result(current, skipped=True)
            self._sweep({current["tag"], current.get("previous")} if current else set())
            token = secrets.token_hex(6)
            tag = f"v{key['version']}-{token}" if key["version"] is not None else f"snapshot-{token}"
            folder = os.path.join(self.home, tag)
            link = self._new_link(tag)  # before writing: a file system without links fails fast
            try:
                write(folder, token)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                os.unlink(link)
                raise
            files = _parquet_names(folder)
            marker = {"format": 1, "key": key, "tag": tag, "previous": current["tag"] if current else None,
                      "files": files, "rows": sum(pq.read_metadata(os.path.join(folder, n)).num_rows for n in files),
                      "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
            with open(os.path.join(folder, MARKER), "w") as f:
                json.dump(marker, f, indent=1)
            if os.path.isdir(self.link) and not os.path.islink(self.link):
                os.rmdir(self.link)  # an empty folder the user made for the export
            os.replace(link, self.link)
            self._sweep({tag, marker["previous"]})
            return self.result(marker, skipped=False)
        finally:
            lock.release()

    def _new_link(self, tag: str) -> str:
        """A link to the export `tag` (not written yet), in the home, ready to be renamed onto `dest`."""
        tmp = os.path.join(self.home, f".link-{tag}")
        try:
            os.symlink(f"{self.home_name}/{tag}", tmp)
        except OSError as e:
            raise VolumePathError(
                f"cannot export to {self.vp.path}: its file system refuses symbolic links ({e.strerror or e}), "
                "and each export is published by swapping one; choose a destination on a file system that "
                "supports them"
            ) from None
        return tmp

    def _sweep(self, keep: set) -> None:
        """Remove everything in the home but `keep`: older exports and leftovers of killed ones."""
        for entry in os.scandir(self.home):
            if entry.name in keep or entry.name == _LOCK:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)


__all__ = ["ExportResult", "MARKER", "TableError", "export_delta", "layout"]
