"""Delta table -> Parquet files on a volume, published atomically, once per table version.

    from air_core.delta import export_delta, current_export

    r = export_delta("/Volumes/main/ml/raw/tables/clicks", "/Volumes/main/ml/raw/exports/clicks")
    r.path   # /Volumes/main/ml/raw/exports/clicks/_exports/v7-20250612T101500Z-3f9a1c2b0d4e

Two engines read the table and write the Parquet files: `deltalake` (no
JVM; `deltalake_engine`), the default, and Spark (classic or Connect;
`spark_engine`) when a session is given. `publication` publishes what they
write with only what object storage offers (no links, locks, folder renames
or appends): each export is written into a folder of its own under
`dest/_exports/`, then `dest/_air_export.json`, a pointer written whole and
renamed into place (over the Files API: each file staged on local disk and
put whole, the pointer last), names it. A reader never sees half an export, a killed
export leaves the previous one served, and an export replaced an hour ago
or more is removed by the next export.

What to give a reader: this library's front doors resolve `dest` themselves
(`current_export`). Any other reader (`load_dataset("parquet", data_dir=...)`,
`spark.read.parquet`) is given the current export's own folder,
`ExportResult.path` or `current_export(dest)`: it holds exactly that
export's Parquet files and stays in place for at least an hour after a
newer export replaces it. A plain listing of `dest` itself finds nothing.

Importing this package loads neither pyarrow nor deltalake; `export_delta`
loads the engine it uses.
"""

from __future__ import annotations

from typing import Any

from ..errors import OptionError, TableError
from .publication import Destination, ExportResult, current_export


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
        table: without `spark`, a Delta table: a volume path (`/Volumes/...`,
            where the volume is mounted), a local path or a URI deltalake reads; with `spark`, a table name
            for `spark.table`.
        dest: a volume path; a folder made for exports (see the module
            docstring). It must not exist yet, or be an empty folder, or hold
            earlier exports.
        spark: a SparkSession (classic or Spark Connect) that reads and writes
            instead of deltalake. It must see `dest` at the same path as this
            process (on Databricks, or a local session off it); not over the
            Files API. The export is
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
        What `dest` now serves; `path` is the export's own folder.
        `skipped=True` when `dest` already served this table version with
        the same sizes, in which case nothing was written.

    Raises:
        TableError: not a Delta table, a version it does not have, or a data
            file its log lists that is missing or unreadable.
        VolumePathError: `dest` is malformed, inside the table, something
            other than a folder of exports, or not writable.
        OptionError: a size or version out of range; `spark` over the Files API.
    """
    for name, value in (("rows_per_file", rows_per_file), ("rows_per_row_group", rows_per_row_group),
                        ("version", version)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0
                                  or (value == 0 and name != "version")):
            raise OptionError(f"{name}={value!r}: give a {'non-negative' if name == 'version' else 'positive'} "
                              "integer, or leave it unset")
    target = Destination(dest)
    if spark is None:
        from . import deltalake_engine

        snapshot = deltalake_engine.snapshot(table, version, rows_per_file, rows_per_row_group, progress)
    else:
        from ..io import transport
        from . import spark_engine

        if transport.remote(target.vp.local) is not None:
            raise OptionError(f"spark= writes the export with Spark's own writers, which need {target.vp.volume} "
                              "as a file system, and this process reaches it over the Files API: leave "
                              "spark unset (deltalake stages each file on local disk and uploads it), or export "
                              "where the volume is mounted")
        if rows_per_row_group is not None:
            raise OptionError("rows_per_row_group applies to the deltalake path: Spark sizes row groups "
                              "in bytes itself; leave it unset with spark=")
        snapshot = spark_engine.snapshot(spark, table, version, rows_per_file)
    return target.publish(snapshot)


__all__ = ["ExportResult", "TableError", "current_export", "export_delta"]
