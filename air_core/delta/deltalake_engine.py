"""Reading a Delta table with `deltalake` (no JVM) and writing it as Parquet: `export_delta`'s default engine.

The table is read through its log: removed files are left out, partition
columns become real columns, and deletion vectors (or column mapping) are
applied by deltalake's own engine. Plain tables are read with
`pyarrow.dataset` over a `SubTreeFileSystem`, never through deltalake's
Python file system, whose threads can abort the interpreter at exit
("terminate called without an active exception", delta-rs #2184). Files
are written front to back, as a volume requires.
"""

from __future__ import annotations

import os
import threading
import weakref
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from tqdm import tqdm

from ..io import transport, volume
from ..errors import TableError
from .messages import first_line
from .publication import Parts, Snapshot
from .sizing import layout


_RELEASE_S = 5.0  # the most to wait for pyarrow's threads to let go of the file visitor


def snapshot(table: str, version: int | None, rows_per_file: int | None, rows_per_row_group: int | None,
             progress: bool) -> Snapshot:
    """The table at `version` (default: the latest), ready to be published (see `export_delta`)."""
    dt, identity = _open(table, version)
    logged_rows, logged_bytes = _log_stats(dt)
    per_file, per_group = layout(logged_bytes / logged_rows if logged_rows else None, rows_per_file,
                                 rows_per_row_group)
    key = {"engine": "deltalake", "table": identity, "table_id": dt.metadata().id, "version": dt.version(),
           "rows_per_file": per_file, "rows_per_row_group": per_group}

    def write(folder: str, token: str, parts: Parts) -> int:
        return _write(dt, identity, folder, token, parts, per_file, per_group, progress, logged_rows)

    return Snapshot(key, write, _local_path(dt.table_uri))


def _open(table: str, version: int | None):
    """(DeltaTable at `version`, the table's identity: its volume path or the path given)."""
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError
    except ImportError:
        raise ImportError("exporting a Delta table without Spark needs the deltalake package: "
                          "pip install 'air-uc-volume[delta]'") from None

    identity, uri = table, table
    if table.startswith(("/Volumes/", "dbfs:/Volumes/")):
        vp = volume.parse(table)
        if transport.remote(vp.local) is not None:
            raise TableError(f"{vp.path}: this process reaches its volume over the Files API, and deltalake reads a "
                             "table only from a file system or an object store URI: read it where the volume is "
                             "mounted, or give the table's location in cloud storage (s3://, abfss://, gs://)")
        identity, uri = vp.path, vp.local
    local = _local_path(uri)
    if local is not None and not os.path.exists(local):
        raise TableError(f"{table} does not exist: give the folder of a Delta table (the one holding _delta_log/)")
    try:
        dt = DeltaTable(uri)
    except TableNotFoundError as e:
        raise TableError(f"{table} is not a Delta table ({first_line(e)}): give the table's root folder, "
                         "the one holding _delta_log/ with its commits") from None
    except DeltaError as e:
        raise TableError(f"{table} could not be opened as a Delta table: {first_line(e)}") from None
    latest = dt.version()
    if version is not None and version != latest:
        if version > latest:
            raise TableError(f"{table} has no version {version}: its latest version is {latest}; "
                             "leave version unset to export the latest")
        try:
            dt.load_as_version(version)
        except DeltaError as e:
            raise TableError(f"version {version} of {table} can no longer be read ({first_line(e)}): its log "
                             f"entries were cleaned up; export a later version (latest: {latest})") from None
    return dt, identity


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


def _write(dt, table: str, folder: str, token: str, parts: Parts, rows_per_file: int,
           rows_per_row_group: int, progress: bool, expected_rows: int | None) -> int:
    """Write the table's rows into `folder` (created), as part-<token>-<i>.parquet files, each given to
    `parts` once closed (asked before each batch whether to go on); returns the rows."""
    with _read_errors_as_table_error(dt, table):
        _check_files_exist(dt)
        reader = _reader(dt)
    written = 0
    with tqdm(total=expected_rows, unit="rows", unit_scale=True, disable=not progress, desc="export") as bar:
        def counted():
            nonlocal written
            # Only reading runs inside: the writer's errors are raised in write_dataset, not here. An export
            # that failed ends the rows early: an exception raised into write_dataset (from here or from
            # its file visitor) can hang or abort its writer threads.
            with _read_errors_as_table_error(dt, table):
                for batch in reader:
                    if not parts.wanted():
                        return
                    bar.update(batch.num_rows)
                    written += batch.num_rows
                    yield batch

        def visit(file) -> None:  # noqa: ANN001 - pyarrow's WrittenFile
            parts.finished(file.path)

        # pyarrow's I/O threads let go of the visitor just after write_dataset returns, taking the GIL to do
        # so; a process that exits before then aborts ("terminate called without an active exception").
        released = threading.Event()
        weakref.finalize(visit, released.set)
        pads.write_dataset(
            pa.RecordBatchReader.from_batches(reader.schema, counted()), folder, format="parquet",
            basename_template=f"part-{token}-{{i}}.parquet", max_rows_per_file=rows_per_file,
            min_rows_per_group=rows_per_row_group, max_rows_per_group=rows_per_row_group,
            existing_data_behavior="error", file_visitor=visit)
        del visit
        released.wait(_RELEASE_S)
    if not written:  # an empty table still exports its schema
        os.makedirs(folder, exist_ok=True)
        empty = os.path.join(folder, f"part-{token}-0.parquet")
        pq.write_table(reader.schema.empty_table(), empty)
        parts.finished(empty)
    return written


def _check_files_exist(dt) -> None:
    """Fail before writing when a data file the log lists is gone.

    A read that fails inside `write_dataset` can leave pyarrow's writer threads
    behind, and the interpreter's exit then aborts ("terminate called without an
    active exception"), several runs in a hundred; a missing file, the usual
    cause, is found here instead, by one `stat` per file.
    """
    for uri in dt.file_uris():
        path = _local_path(uri)
        if path is not None and not os.path.exists(path):
            raise FileNotFoundError(f"{uri} does not exist")


@contextmanager
def _read_errors_as_table_error(dt, table: str) -> Iterator[None]:
    """A failure to read the table's data files, raised as a `TableError` that says what to do."""
    from deltalake.exceptions import DeltaError

    try:
        yield
    except (OSError, pa.ArrowException, DeltaError) as e:
        raise TableError(
            f"version {dt.version()} of {table} cannot be read: {first_line(e)}. A data file its log "
            "lists is missing or unreadable (removed by VACUUM or by hand?): export a later version, or "
            "restore the file"
        ) from None
