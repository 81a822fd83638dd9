"""Reading a table with Spark (classic or Spark Connect) and writing it as Parquet with Spark's executors.

An export is identified by the table name, the Delta version (from
`DESCRIBE HISTORY`, where the catalog keeps one, as on Databricks; the
snapshot is then pinned to that version with `versionAsOf`) and a digest of
the files Spark reads. A table whose files Spark cannot name (a view over
generated rows) cannot be recognised, so it is exported every time. Spark
leaves commit markers (`_SUCCESS`, `_started_*`, `_committed_*`) and
checksum files beside the Parquet files; they are removed, so that the
export's folder holds only Parquet files, as foreign readers need
(Hugging Face's parquet loader fails on `_SUCCESS`).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from typing import Any

from ..errors import AirError, TableError
from .messages import first_line
from .publication import Parts, Snapshot
from .sizing import ROW_GROUP_BYTES


def snapshot(spark: Any, name: str, version: int | None, rows_per_file: int | None) -> Snapshot:
    """The table `name` as `spark` reads it, ready to be published (see `export_delta`)."""
    from pyspark.errors import PySparkException

    if version is None:
        version = _history_version(spark, name)
    try:
        reader = spark.read if version is None else spark.read.option("versionAsOf", version)
        df = reader.table(name)
        files = sorted(df.inputFiles())
    except PySparkException as e:
        what = f"version {version} of table {name!r}" if version is not None else f"table {name!r}"
        hint = ("reading a version (time travel) needs a Delta table" if version is not None
                else "check the name (catalog.schema.table) and that the session can read it")
        raise TableError(f"Spark could not read {what}: {first_line(e)}; {hint}") from None
    digest = hashlib.sha256("\n".join(files).encode()).hexdigest()[:32] if files else secrets.token_hex(16)
    key = {"engine": "spark", "table": name, "table_id": None, "version": version, "fingerprint": digest,
           "rows_per_file": rows_per_file}
    return Snapshot(key, lambda folder, token, parts: _write(df, folder, rows_per_file, parts))


def _write(df: Any, folder: str, rows_per_file: int | None, parts: Parts) -> int:
    """Write `df` as Parquet into `folder` (which must not exist), with streaming-sized row groups, each file
    given to `parts` once Spark's markers are gone; the rows."""
    import pyarrow.parquet as pq
    from pyspark.errors import PySparkException

    writer = df.write.option("parquet.block.size", ROW_GROUP_BYTES)
    if rows_per_file is not None:
        writer = writer.option("maxRecordsPerFile", rows_per_file)
    try:
        writer.parquet(folder)
    except PySparkException as e:
        raise AirError(f"Spark could not write the export into {folder}: {first_line(e)}") from None
    rows, files = 0, []
    for entry in os.scandir(folder):
        if entry.name.endswith(".parquet") and entry.name[0] not in "._":
            rows += pq.read_metadata(entry.path).num_rows
            files.append(entry.path)
        elif entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    for path in files:
        if not parts.wanted():  # the export failed: the other files are not wanted
            break
        parts.finished(path)
    return rows


def _history_version(spark: Any, name: str) -> int | None:
    """The table's latest Delta version, or None where the catalog keeps no history (not Delta)."""
    from pyspark.errors import PySparkException

    try:
        row = spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()
    except PySparkException:
        return None
    return None if row is None else int(row["version"])
