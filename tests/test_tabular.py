"""Parquet units read through the node cache (air_core.tabular)."""

import os
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq

from air_core import Cache, list_folder
from air_core.tabular import parquet_units, read_units


def test_files_streamed_past_a_full_cache_leave_memory_once_their_row_groups_are_read(volume, tmp_path):
    mb = 1 << 20
    for i in range(12):
        path = volume.local(f"t/part-{i:02d}.parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.table({"blob": [os.urandom(mb // 4) for _ in range(4)]})
        pq.write_table(table, path, row_group_size=2)
    manifest = list_folder(volume.path("t"))
    units = parquet_units(manifest)
    cache = Cache(str(tmp_path / "full"), limit_bytes=1)  # admits nothing: files are read into memory
    tracemalloc.start()
    try:
        rows = sum(t.num_rows for t in read_units(manifest, units, cache, prefetch=2, prefetch_bytes=2 * mb))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows == 48 and cache.stats.not_admitted == 12
    assert peak < 6 * mb  # a pass holds a few files, not all 12
