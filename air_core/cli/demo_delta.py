"""The demo's tabular section: a Delta table on the demo volume, exported to Parquet and streamed by row group."""

from __future__ import annotations

import time

from ..io import volume


def run(volume_path: str) -> None:
    """Write a small Delta table (three versions, a delete), export it twice, stream the export."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from ..io.cache import Cache
    from ..delta import export_delta
    from ..io.listing import list_folder
    from ..read.parquet_io import parquet_units, read_units

    table = f"{volume_path}/tables/reviews"
    local = volume.parse(table).local
    for k in range(3):
        ids = list(range(k * 10_000, (k + 1) * 10_000))
        write_deltalake(local, pa.table({"id": ids, "stars": [i % 5 + 1 for i in ids],
                                         "split": ["train" if i % 10 else "test" for i in ids]}),
                        mode="append", partition_by=["split"])
    DeltaTable(local).delete("stars = 1")
    t = time.perf_counter()
    first = export_delta(table, f"{volume_path}/exports/reviews")
    took = time.perf_counter() - t
    again = export_delta(table, f"{volume_path}/exports/reviews")
    print(f"export_delta({table}): version {first.version}, {first.rows:,} rows in {len(first.files)} Parquet file(s), "
          f"{took:.2f} s; again: {'nothing written' if again.skipped else 'written'}")
    manifest = list_folder(first.path)
    units = parquet_units(manifest)
    t = time.perf_counter()
    rows = sum(tbl.num_rows for tbl in read_units(manifest, units, Cache()))
    print(f"streamed {rows:,} rows from {len(units)} row groups in {time.perf_counter() - t:.2f} s "
          "(partition column 'split' kept)")
