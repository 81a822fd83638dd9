"""The Spark side of `export_delta`: read a table with Spark (classic or Spark Connect), write Parquet.

Spark writes with its executors straight into the export's folder; the
publication (marker, link swap) is `delta.py`'s. An export is identified by
the table name, the Delta version (from `DESCRIBE HISTORY`, where the
catalog keeps one, as on Databricks; the snapshot is then pinned to that
version with `versionAsOf`) and a digest of the files Spark reads. A table
whose files Spark cannot name (a view over generated rows) cannot be
recognised, so it is exported every time.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from .delta import ROW_GROUP_BYTES, TableError, _first_line
from .errors import AirError


def snapshot(spark: Any, name: str, version: int | None) -> tuple[Any, dict]:
    """(the table as a DataFrame, the key that identifies what it holds)."""
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
        raise TableError(f"Spark could not read {what}: {_first_line(e)}; {hint}") from None
    digest = hashlib.sha256("\n".join(files).encode()).hexdigest()[:32] if files else secrets.token_hex(16)
    return df, {"engine": "spark", "table": name, "table_id": None, "version": version, "fingerprint": digest}


def write(df: Any, folder: str, rows_per_file: int | None) -> None:
    """Write `df` as Parquet into `folder` (which must not exist), with streaming-sized row groups."""
    from pyspark.errors import PySparkException

    writer = df.write.option("parquet.block.size", ROW_GROUP_BYTES)
    if rows_per_file is not None:
        writer = writer.option("maxRecordsPerFile", rows_per_file)
    try:
        writer.parquet(folder)
    except PySparkException as e:
        raise AirError(f"Spark could not write the export into {folder}: {_first_line(e)}") from None


def _history_version(spark: Any, name: str) -> int | None:
    """The table's latest Delta version, or None where the catalog keeps no history (not Delta)."""
    from pyspark.errors import PySparkException

    try:
        row = spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()
    except PySparkException:
        return None
    return None if row is None else int(row["version"])

