"""A read of some columns of a Parquet table fetches only their column chunks (and the footer), through every door."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import air_core
from air_core.io.cache import Cache
from air_core.planning.column_chunks import coalesce, selected

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
