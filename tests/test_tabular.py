"""Parquet units read through the node cache (air_core.read.parquet_io)."""

import os
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from air_core.io.cache import Cache
from air_core.io.listing import list_folder
from air_core.planning.shares import Planning
from air_core.read import parquet_io
from air_core.read.parquet_io import ParquetError, parquet_units, read_units
from air_core.source import resolve_source


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


def test_files_of_different_schemas_are_refused_by_name(volume):
    def write(rel, table):
        volume.local(rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, volume.local(rel))

    ids = pa.array([1, 2], pa.int64())
    write("ok/a.parquet", pa.table({"id": ids, "tags": pa.array([[1], [2]], pa.list_(pa.int64()))}))
    strict = pa.list_(pa.field("item", pa.int64(), nullable=False))  # another writer's nullability
    write("ok/b.parquet", pa.Table.from_arrays([pa.array([[3], [4]], strict), ids],
                                               schema=pa.schema([pa.field("tags", strict), pa.field("id", pa.int64())])))
    assert len(parquet_units(list_folder(volume.path("ok")))) == 2  # column order and nullability may differ

    write("bad/a.parquet", pa.table({"id": ids, "x": [0.5, 1.5]}))
    write("bad/b.parquet", pa.table({"id": ["x", "y"], "y": [1, 2]}))
    with pytest.raises(ParquetError, match=r"bad/b\.parquet and .*bad/a\.parquet have different columns "
                                           r"\(id: string vs int64; extra 'y'; no 'x'\).*include=/exclude="):
        parquet_units(list_folder(volume.path("bad")))


def test_parquet_pieces_carry_only_their_files():
    from air_core.planning.rows import RowGroup, RowSlice
    from air_core.read.parquet import localize
    from air_core.planning.rows import piece_bytes

    a, b = RowGroup(7, 0, 100, 1000), RowGroup(3, 1, 100, 1000)
    files, local = localize([RowSlice(a, 50, 100), b, RowGroup(7, 1, 10, 10)])
    assert files == [7, 3]
    assert local == [RowSlice(RowGroup(0, 0, 100, 1000), 50, 100), RowGroup(1, 1, 100, 1000), RowGroup(0, 1, 10, 10)]
    assert piece_bytes(local[0]) == 500 and piece_bytes(b) == 1000


def _ten_row_groups(volume) -> int:
    """t/a.parquet: ids 0..99,999 and a string each, in row groups of 10,000; returns its size."""
    path = volume.local("t/a.parquet")
    path.parent.mkdir(parents=True)
    ids = list(range(100_000))
    pq.write_table(pa.table({"id": ids, "s": [f"row {i}" for i in ids]}), path, row_group_size=10_000)
    return path.stat().st_size


def test_a_share_of_a_files_row_groups_fetches_their_ranges_and_a_whole_share_the_file(volume, tmp_path,
                                                                                        monkeypatch):
    ids, size = list(range(100_000)), _ten_row_groups(volume)
    manifest = list_folder(volume.path("t"))
    units = parquet_units(manifest)
    assert len(units) == 10 and all(0 < u.start < u.stop < size for u in units)

    # The process that planned has the footer: their column chunks alone.
    half = Cache(str(tmp_path / "half"))
    rows = [r for t in read_units(manifest, units[3:7], half) for r in t.column("id").to_pylist()]
    assert rows == ids[30_000:70_000]
    needed = sum(u.stop - u.start for u in units[3:7])
    assert half.stats.bytes_fetched == needed and half.stats.misses == 4

    # One that did not (keeping no footers) fetches the file's tail for it besides, once.
    monkeypatch.setattr(parquet_io, "_FOOTERS", parquet_io._Footers(0))
    other = Cache(str(tmp_path / "other"))
    rows = [r for t in read_units(manifest, units[3:7], other) for r in t.column("id").to_pylist()]
    assert rows == ids[30_000:70_000]
    assert other.stats.bytes_fetched == needed + (64 << 10) and other.stats.misses == 5

    whole = Cache(str(tmp_path / "whole"))
    assert sum(t.num_rows for t in read_units(manifest, units, whole)) == 100_000
    assert whole.stats.bytes_fetched == size and whole.stats.misses == 1  # one whole-file copy, as before
    assert whole.lookup(manifest.volume_path(0), size, int(manifest.mtimes[0])) is not None


def test_parts_read_on_one_node_fetch_a_file_they_read_all_of_whole(volume, tmp_path):
    ids, size = list(range(100_000)), _ten_row_groups(volume)
    reader = resolve_source(volume.path("t")).reader
    units = reader.units()

    # Two tasks over all of the file (Ray may run them one after another): the first fetches it whole, the
    # second's row groups are in the node cache already.
    node = Cache(str(tmp_path / "node"))
    parts = reader.parts([units[:5], units[5:]], Planning(), epoch=0)
    rows = [r for p in parts for _, t in p.read(node) for r in t.column("id").to_pylist()]
    assert rows == ids
    assert node.stats.bytes_fetched == size and node.stats.misses == 1

    # Two tasks over a rank's share of it: their ranges and the footer's tail, no more.
    share = Cache(str(tmp_path / "share"))
    parts = reader.parts([units[3:5], units[5:7]], Planning(), epoch=0)
    rows = [r for p in parts for _, t in p.read(share) for r in t.column("id").to_pylist()]
    assert rows == ids[30_000:70_000]
    assert share.stats.bytes_fetched == sum(u.stop - u.start for u in units[3:7])  # footer read when planned
