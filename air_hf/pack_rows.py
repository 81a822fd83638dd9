"""Pack mode: the rows of a pack's shards as the rows files mode gives for the loose files.

Columns are built from the shards' Arrow columns, never file by file: a
row group of ~100 images becomes one table without a Python object per file.
`local_path` is empty: a packed file has no copy of its own on disk (empty
rather than null, so that torch's default collate takes rows as it takes
the loose files' rows).
"""

from __future__ import annotations

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from air_core import AirError
from air_core.pack_read import volume_paths


def table(shard_rows: pa.Table, root: str, features: datasets.Features, schema: pa.Schema, decode: str) -> pa.Table:
    """Rows (`features`, whose Arrow schema is `schema`) for the shard rows of one piece of the pack."""
    paths = volume_paths(root, shard_rows["path"])
    cols = {"path": paths, "local_path": pa.array([""] * shard_rows.num_rows, pa.string()), "size": shard_rows["size"]}
    if decode == "bytes":
        cols["bytes"] = shard_rows["bytes"].cast(schema.field("bytes").type)
    elif decode == "text":
        try:
            cols["text"] = shard_rows["bytes"].cast(pa.string())
        except pa.ArrowInvalid as e:
            raise AirError(f"a file under {root} is not UTF-8 text ({e}): use decode='bytes' for binary files") from None
    elif decode in ("image", "audio"):
        data = shard_rows["bytes"].cast(pa.binary()).combine_chunks()
        cols[decode] = pa.StructArray.from_arrays([data, paths.combine_chunks()], names=["bytes", "path"])
    if "label" in features:
        names = pa.array(features["label"].names, pa.string())
        cols["label"] = pc.index_in(shard_rows["label"], value_set=names)
    return pa.Table.from_pydict(cols).cast(schema)
