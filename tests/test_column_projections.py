"""A read of some columns of a Parquet table fetches only their column chunks (and the footer), through every door."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import air_core
from air_core.io.cache import Cache
from air_core.io import held_open as held_open_module
from air_core.io.held_open import held_open
from air_core.planning.column_chunks import coalesce, one_open_batches, selected

ROWS, IMAGE = 400, 20_000


def _wide(volume, rel: str = "wide/part-0.parquet") -> pa.Table:
    """A table with its images inline (the Hub's layout for image-text sets): 8 MB, of which the text is 1%."""
    table = pa.table({"id": range(ROWS), "image": [os.urandom(IMAGE) for _ in range(ROWS)],
                      "text": [f"a caption for image {i}" for i in range(ROWS)]})
    volume.local(rel).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, volume.local(rel), row_group_size=50)
    return table


def _chunk_bytes(path, column: str) -> int:
    md = pq.read_metadata(path)
    return sum(md.row_group(g).column(c).total_compressed_size for g in range(md.num_row_groups)
               for c in range(md.num_columns) if md.row_group(g).column(c).path_in_schema == column)


def _data_sent(server) -> int:
    return sum(r.sent for r in server.requests("GET", "files"))


def test_chunks_a_column_names_are_its_leaves_and_close_ones_are_one_span():
    chunks = [("id", 4, 100), ("image", 100, 9_000_000), ("text", 9_000_000, 9_000_500),
              ("tags.list.element", 9_000_600, 9_001_000), ("tagsx", 9_001_000, 9_002_000)]
    assert selected(chunks, ["text"]) == [(9_000_000, 9_000_500)]
    assert selected(chunks, ["id", "text"]) == [(4, 100), (9_000_000, 9_000_500)]
    assert selected(chunks, ["text", "tags"]) == [(9_000_000, 9_001_000)]  # 100 bytes apart: one request
    assert selected(chunks, ["tags.list"]) == [(9_000_600, 9_001_000)]
    assert selected(chunks, ["split"]) == []  # a partition column has no chunk
    assert coalesce([(50, 60), (0, 10), (5, 20), (20_000, 20_001)], hole=30) == [(0, 60), (20_000, 20_001)]


def test_small_ranges_of_one_file_are_fetched_through_one_open_and_a_large_one_alone():
    ranges = [(0, 0, 10), (0, 50, 60), (1, 0, 10), (1, 100, 200), (1, 300, 400), (1, 400, 2_000), (2, 0, 5)]
    assert one_open_batches(ranges, limit=250) == [[(0, 0, 10), (0, 50, 60)], [(1, 0, 10), (1, 100, 200), (1, 300, 400)],
                                                   [(1, 400, 2_000)], [(2, 0, 5)]]


def test_a_file_held_open_stays_open_while_in_use_and_idle_ones_close_past_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(held_open_module, "HELD", 1)
    paths = []
    for name in "abc":
        (tmp_path / name).write_bytes(name.encode())
        st = os.stat(tmp_path / name)
        paths.append((str(tmp_path / name), name, st.st_size, st.st_mtime_ns))
    with held_open(*paths[0]) as a:
        with held_open(*paths[1]) as b, held_open(*paths[2]) as c:
            assert os.pread(a, 1, 0) == b"a" and os.pread(b, 1, 0) == b"b" and os.pread(c, 1, 0) == b"c"
        assert os.pread(a, 1, 0) == b"a"  # in use: never closed under its user
    with held_open(*paths[0]) as again:
        assert again == a or os.pread(again, 1, 0) == b"a"
    assert len(held_open_module._held) == 1  # the others closed, idle past the limit


def test_the_hf_door_fetches_only_the_asked_columns_over_the_files_api(files_api):
    import datasets

    import air_hf  # noqa: F401

    v, s = files_api, files_api.server
    table = _wide(v)
    path = v.local("wide/part-0.parquet")
    size, text = path.stat().st_size, _chunk_bytes(path, "text")

    def read(columns):
        return list(datasets.load_dataset("uc-volume", data_dir=v.path("wide"), split="train", streaming=True,
                                          columns=columns))

    s.clear_trace()
    rows = read(["text"])
    assert [r["text"] for r in rows] == table["text"].to_pylist()
    assert _data_sent(s) <= text + 64 * 1024  # the text chunks and the footer's tail: not the images
    s.clear_trace()
    assert [r["id"] for r in read(["id"])] == list(range(ROWS))
    assert 0 < _data_sent(s) <= _chunk_bytes(path, "id")  # only what is missing: the id chunks
    s.clear_trace()
    assert [r["image"] for r in read(None)] == table["image"].to_pylist()
    assert size - 64 * 1024 <= _data_sent(s) <= size  # a full read: every byte of the row groups, once
    s.clear_trace()
    assert [r["text"] for r in read(["text"])] == table["text"].to_pylist()
    assert _data_sent(s) == 0  # served from the full read's copies


def test_row_streams_of_two_ranks_cache_only_the_asked_columns(volume, tmp_path):
    table = _wide(volume)
    text = _chunk_bytes(volume.local("wide/part-0.parquet"), "text")
    cache = tmp_path / "node"
    got = []
    for rank in range(2):
        stream = air_core.RowStream(volume.path("wide"), columns=["text"], rank=rank, world_size=2,
                                    cache_dir=str(cache))
        got += [r["text"] for r in stream]
    assert sorted(got) == sorted(table["text"].to_pylist())
    held = Cache(str(cache)).usage()
    assert text <= held <= text + 64 * 1024 + 4096  # text chunks and one footer tail per node, not the images


@pytest.mark.slow
def test_ray_reads_only_the_asked_columns(volume, tmp_path, ray_cluster):
    import air_ray

    table = _wide(volume)
    text = _chunk_bytes(volume.local("wide/part-0.parquet"), "text")
    cache = tmp_path / "node"
    ds = air_ray.read_uc_volume(volume.path("wide"), columns=["text"], cache_dir=str(cache))
    assert sorted(r["text"] for r in ds.take_all()) == sorted(table["text"].to_pylist())
    assert text <= Cache(str(cache)).usage() <= text + 64 * 1024 + 4096


def test_a_projection_read_as_several_hf_shards_opens_its_file_once_for_their_chunks(volume, monkeypatch):
    import datasets

    import air_hf  # noqa: F401

    table = _wide(volume)
    path = str(volume.local("wide/part-0.parquet"))
    opened, os_open = [], os.open

    def counted(file, *args, **kwargs):
        if os.fspath(file) == path:
            opened.append(file)
        return os_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", counted)
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("wide"), split="train", streaming=True,
                               columns=["text"])
    assert ds.num_shards > 1  # each shard a read of its own, one after another
    assert [r["text"] for r in ds] == table.column("text").to_pylist()
    # The chunks of every row group, across the shards, through one open (the footer was read planning).
    assert len(opened) < ds.num_shards, opened
