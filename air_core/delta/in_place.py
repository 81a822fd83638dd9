"""A Delta table read in place: the data files of one version, where those files hold exactly its rows.

That is so when the table has no deletion vectors (rows a file still holds
but the table deleted), no column mapping (column names the files do not
use) and no partition columns (values kept in the log, not in the files):
then its rows are the rows of the Parquet files its log lists, and a
listing of those files is all a front door needs. Anything else is exported
first (`export_delta`), which reads the table through its log exactly.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

import pyarrow as pa

from ..io import volume
from ..errors import OptionError, TableError
from ..manifest import Manifest
from .deltalake_engine import _open


def table_files(table: str, version: int | None = None) -> Manifest:
    """The data files of `table` at `version` (default: the latest), as a listing rooted at the table's folder.

    Raises:
        OptionError: the table is not on a volume, or its files alone are not its rows (say why, and
            that `data_dir=` exports it).
        TableError: not a Delta table, a version it does not have, or a file its log lists that is not
            as the log says.
    """
    if not table.startswith(("/Volumes/", "dbfs:/Volumes/")):
        raise OptionError(f"delta_table={table!r} without data_dir= reads the table in place, from a volume: "
                          "give its /Volumes/... path, or give data_dir= to export it")
    vp = volume.parse(table)
    dt, _ = _open(vp.path, version)
    mapping = dt.metadata().configuration.get("delta.columnMapping.mode", "none")
    why = [what for what, used in (
        ("deletion vectors", "deletionVectors" in set(dt.protocol().reader_features or ())),
        ("column mapping", mapping != "none"),
        (f"partition columns {list(dt.metadata().partition_columns)}", bool(dt.metadata().partition_columns)),
    ) if used]
    if why:
        raise OptionError(f"{vp.path} uses {' and '.join(why)}, so its data files alone are not its rows: give "
                          "data_dir= (a volume folder) to export it as Parquet, which reads it exactly")
    adds = pa.table(dt.get_add_actions(flatten=True)).select(["path", "size_bytes"]).to_pylist()
    rels = [unquote(a["path"]) for a in adds]

    def stat(rel: str) -> os.stat_result:
        try:
            return os.stat(f"{vp.local}/{rel}")
        except FileNotFoundError:
            raise TableError(f"version {dt.version()} of {vp.path} lists {rel}, which is gone (removed by VACUUM "
                             "or by hand?): read a later version, or give data_dir= to export one") from None

    with ThreadPoolExecutor(32) as pool:  # a stat is a round trip on a volume
        stats = list(pool.map(stat, rels))
    for a, rel, st in zip(adds, rels, stats):
        if st.st_size != a["size_bytes"]:
            raise TableError(f"{vp.path}/{rel} holds {st.st_size} bytes but the table's log says {a['size_bytes']}:"
                             " the table was changed outside Delta; give data_dir= to export a version that reads")
    return Manifest.build(vp.path, [(rel, st.st_size, st.st_mtime_ns) for rel, st in zip(rels, stats)])
