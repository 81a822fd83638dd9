"""A `uc-volume` stream resumed from its `state_dict()` starts where it stopped: the pieces of its shard before the
position (files, spans, row groups) are not fetched, and inside the piece it stopped in, no medium of a record before
the position is; the rows are those the stream uninterrupted gives. A state saved before positions named pieces
resumes too."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import load_dataset

import air_hf  # noqa: F401 - registers uc-volume
from air_core.errors import RecordError
from air_core.io.cache import Cache

FILES, ROWS = 8, 10  # rows a file; two shards of four files each


def write_json(volume, folder: str) -> None:
    for f in range(FILES):
        volume.write(f"{folder}/part{f}.jsonl", "".join(json.dumps({"id": f * ROWS + k}) + "\n" for k in range(ROWS)))


def write_parquet(volume, folder: str) -> None:
    for f in range(FILES):
        out = io.BytesIO()
        pq.write_table(pa.table({"id": list(range(f * ROWS, (f + 1) * ROWS))}), out, row_group_size=ROWS // 2)
        volume.write(f"{folder}/part{f}.parquet", out.getvalue())


def write_media(volume, folder: str) -> None:
    """One records file naming a medium a record (one piece of records): its rows' ids are their media's numbers."""
    for k in range(FILES * ROWS):
        volume.write(f"{folder}/media/{k}.bin", bytes([k]) * 10)
    volume.write(f"{folder}/records/r.jsonl",
                 "".join(json.dumps({"id": k, "medium": f"{k}.bin"}) + "\n" for k in range(FILES * ROWS)))


WRITE = {"json": write_json, "parquet": write_parquet, "media": write_media}
OPTIONS = {"json": {}, "parquet": {}, "media": {"media": {"medium": "file"}, "media_dir": "media"}}


def load(volume, hf_cache: Path, kind: str, **options):
    return load_dataset("uc-volume", data_dir=volume.path(kind), split="train", streaming=True,
                        cache_dir=str(hf_cache), **{"num_workers": 2, **OPTIONS[kind], **options})


def fetched(volume, folder: str) -> set[int]:
    """The files of `folder` (as numbers: partN, or N for a medium) whose copy is in the node cache."""
    cache, root = Cache(), volume.local(folder)
    return {int(path.stem.removeprefix("part")) for path in root.rglob("*.*") if path.parent.name != "records"
            and cache.lookup(f"{volume.path(folder)}/{path.relative_to(root)}", *_version(path))}


@pytest.mark.parametrize(("kind", "stop"), [("json", 25), ("parquet", 23), ("media", 23), ("json", 57)],
                         ids=["json inside a file", "parquet inside a row group", "media inside a piece",
                              "json inside the second shard"])
def test_a_resumed_stream_fetches_nothing_before_its_position(volume, tmp_path, kind, stop):
    WRITE[kind](volume, kind)
    full = [r["id"] for r in load(volume, tmp_path, kind)]
    ds = load(volume, tmp_path, kind)
    it = iter(ds)
    head = [next(it)["id"] for _ in range(stop)]
    state = ds.state_dict()
    Cache().clear()
    resumed = load(volume, tmp_path, kind)
    resumed.load_state_dict(state)
    assert head + [r["id"] for r in resumed] == full
    # The rows before the position lie in whole pieces before it and the start of the piece it is in: a file of
    # JSON Lines (a span), a row group (its file, fetched whole, once both of its row groups are done), a medium.
    unit = 1 if kind == "media" else ROWS
    done = set(range(FILES * ROWS // unit)) - {r // unit for r in full[stop:]}
    assert done and not fetched(volume, kind) & done
    assert fetched(volume, kind) | done == set(range(FILES * ROWS // unit))


def test_a_resumed_stream_of_files_fetches_none_of_the_files_before_its_position(volume, tmp_path):
    paths = volume.files("many", 20)
    ds = load_dataset("uc-volume", data_dir=volume.path("many"), split="train", streaming=True,
                      cache_dir=str(tmp_path), num_workers=2)
    full = [r["path"] for r in ds]
    it = iter(ds)
    head = [next(it)["path"] for _ in range(13)]  # 3 into the second shard
    state = ds.state_dict()
    Cache().clear()
    resumed = load_dataset("uc-volume", data_dir=volume.path("many"), split="train", streaming=True,
                           cache_dir=str(tmp_path), num_workers=2)
    resumed.load_state_dict(state)
    assert head + [r["path"] for r in resumed] == full
    cache = Cache()
    copied = {p for p in paths if cache.lookup(p, *_version(volume.local(p.removeprefix(volume.path() + "/"))))}
    assert copied == set(full[13:])


def _version(local: Path) -> tuple[int, int]:
    st = local.stat()
    return st.st_size, st.st_mtime_ns


def without_pieces(state):
    """`state` as a release that did not save positions in pieces saved it."""
    if isinstance(state, dict):
        return {k: without_pieces(v) for k, v in state.items() if k not in ("piece_idx", "piece_example_idx")}
    if isinstance(state, list):
        return [without_pieces(v) for v in state]
    return state


@pytest.mark.parametrize("kind", ["json", "parquet"])
def test_a_state_saved_without_positions_in_pieces_resumes_exactly(volume, tmp_path, kind):
    WRITE[kind](volume, kind)
    full = [r["id"] for r in load(volume, tmp_path, kind, shuffle=True)]
    ds = load(volume, tmp_path, kind, shuffle=True)
    it = iter(ds)
    head = [next(it)["id"] for _ in range(47)]
    old = without_pieces(ds.state_dict())
    assert "piece_idx" in json.dumps(ds.state_dict()) and "piece_idx" not in json.dumps(old)
    resumed = load(volume, tmp_path, kind, shuffle=True)
    resumed.load_state_dict(old)
    it = iter(resumed)
    more = [next(it)["id"] for _ in range(10)]
    assert head + more == full[:57]
    # Saved again by this release, the state names the pieces, the rows read and dropped counted in its piece.
    again = load(volume, tmp_path, kind, shuffle=True)
    again.load_state_dict(resumed.state_dict())
    assert head + more + [r["id"] for r in again] == full


def test_the_rows_before_a_piece_that_does_not_parse_are_handed_on_before_the_error(volume, tmp_path):
    # A run is handed on once the next one is read: where that read fails, the run still comes first.
    write_json(volume, "json")
    volume.write("json/part3.jsonl", "".join(json.dumps({"id": 30 + k}) + "\n" for k in range(5)) + "not json\n")
    for rows in (lambda ds: (r["id"] for r in ds), lambda ds: (i for t in ds.with_format("arrow").iter(batch_size=3)
                                                               for i in t["id"].to_pylist())):
        got = []
        with pytest.raises(RecordError, match="part3.jsonl, line 6"):
            got.extend(rows(load(volume, tmp_path, "json", num_workers=1)))
        assert got == list(range(30))


def test_a_position_at_the_end_of_a_row_group_reads_on_from_the_next_one():
    from air_core.planning.rows import RowGroup, RowSlice

    from air_hf.builder import _left

    groups = [RowGroup(file=0, row_group=k, num_rows=10, nbytes=100) for k in range(3)]
    assert _left(groups, (1, 10), in_order=True) == (2, groups[2:], 0)
    assert _left(groups, (1, 4), in_order=True) == (1, [RowSlice(groups[1], 4, 10), groups[2]], 0)
    assert _left(groups, (1, 4), in_order=False) == (1, groups[1:], 4)  # read from its start, 4 rows dropped
