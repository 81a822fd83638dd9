"""RowStream: a table's rows per (rank, worker), every row once, exact resume on the same grid and on another."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from air_core import OptionError, RowStream, StateError, run_state
from air_core.errors import RecordError
from air_core.read import line_spans


@pytest.fixture
def lines(volume, monkeypatch):
    """One JSON Lines file of 500 records in spans of 1,500 bytes, and a small one."""
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 1500)
    rng = random.Random(1)
    volume.write("d/big.jsonl", "".join(json.dumps({"id": i, "t": "x" * rng.randrange(80)}) + "\n" for i in range(500)))
    volume.write("d/small.jsonl", "".join(json.dumps({"id": i, "t": ""}) + "\n" for i in range(500, 520)))
    return volume.path("d")


@pytest.fixture
def parquet(volume):
    for f in range(3):
        table = pa.table({"id": list(range(f * 100, (f + 1) * 100)), "v": [float(i) for i in range(100)]})
        path = volume.local(f"p/part-{f}.parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, row_group_size=30)
    return volume.path("p")


def ids(stream) -> list[int]:
    return [row["id"] for row in stream]


def grid_ids(path, world_size, num_workers, **options) -> list[list[int]]:
    return [ids(RowStream(path, rank=r, world_size=world_size, worker=w, num_workers=num_workers, **options))
            for r in range(world_size) for w in range(num_workers)]


@pytest.mark.parametrize("source", ["lines", "parquet"])
def test_every_row_once_over_ranks_and_workers(source, request):
    path = request.getfixturevalue(source)
    total = 520 if source == "lines" else 300
    for world_size, num_workers in ((1, 1), (2, 3), (3, 2)):
        streams = grid_ids(path, world_size, num_workers, shuffle=True, seed=4)
        assert sorted(i for s in streams for i in s) == list(range(total))


@pytest.mark.parametrize("equalize", ["pad", "drop"])
def test_equalize_gives_every_rank_as_many_rows(lines, equalize):
    per_rank = [sum(len(s) for s in grid_ids(lines, 3, 1, equalize=equalize)[r:r + 1]) for r in range(3)]
    assert len(set(per_rank)) == 1 and per_rank[0] == (520 // 3 if equalize == "drop" else -(-520 // 3))


def test_tables_columns_and_schema(lines):
    stream = RowStream(lines, columns=["id"])
    assert stream.schema.names == ["id"]
    tables = list(stream.tables())
    assert all(t.column_names == ["id"] for t in tables)
    assert sorted(i for t in tables for i in t.column("id").to_pylist()) == list(range(520))


@pytest.mark.parametrize("source", ["lines", "parquet"])
def test_tables_of_a_batch_size_are_compact_and_resume_exactly(source, request):
    path = request.getfixturevalue(source)
    opts = {"rank": 1, "world_size": 2, "shuffle": True, "seed": 2}
    full = ids(RowStream(path, **opts))
    tables = list(RowStream(path, **opts).tables(batch_size=16))
    assert [t.num_rows for t in tables[:-1]] == [16] * (len(tables) - 1) and 0 < tables[-1].num_rows <= 16
    assert [i for t in tables for i in t.column("id").to_pylist()] == full
    small = list(RowStream(path, **opts).tables(batch_size=3))  # of tables of 30 rows or so
    assert all(t.get_total_buffer_size() <= 1.5 * t.nbytes for t in small)  # no other rows' buffers
    first = RowStream(path, **opts)
    head = []
    for table in first.tables(batch_size=16):  # a batch takes rows of several runs (spans, row groups)
        head += table.column("id").to_pylist()
        if len(head) >= 7 * 16:
            break
    again = RowStream(path, **opts)
    again.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert head + ids(again) == full
    with pytest.raises(OptionError, match="batch_size=0"):
        next(RowStream(path, **opts).tables(batch_size=0))


@pytest.mark.parametrize("source", ["lines", "parquet"])
def test_same_grid_resume_mid_run_is_exact(source, request):
    path = request.getfixturevalue(source)
    full = ids(RowStream(path, rank=1, world_size=2, shuffle=True, seed=2))
    first = RowStream(path, rank=1, world_size=2, shuffle=True, seed=2)
    it = iter(first)
    head = [next(it)["id"] for _ in range(37)]
    state = first.state_dict()
    again = RowStream(path, rank=1, world_size=2, shuffle=True, seed=2)
    again.load_state_dict(json.loads(json.dumps(state)))
    assert head + ids(again) == full


@pytest.mark.parametrize("equalize", ["none", "pad"])
def test_a_run_state_resumes_on_another_grid_each_row_once(lines, equalize):
    opts = {"shuffle": True, "seed": 7, "equalize": equalize}
    old = [RowStream(lines, rank=r, world_size=2, worker=w, num_workers=2, **opts) for r in range(2) for w in range(2)]
    delivered: list[int] = []
    for k, stream in enumerate(old):
        it = iter(stream)
        delivered += [next(it)["id"] for _ in range(10 + 13 * k)]
    state = run_state([s.state_dict() for s in old])
    new = [RowStream(lines, rank=r, world_size=3, **opts) for r in range(3)]
    rest = []
    for stream in new:
        stream.load_state_dict(state)
        rest.append(ids(stream))
    everything = delivered + [i for s in rest for i in s]
    if equalize == "none":
        assert sorted(everything) == list(range(520))
    else:
        assert set(everything) == set(range(520)) and len({len(s) for s in rest}) == 1
    # and again, from the resumed run, on one rank
    mid = []
    for stream in new:
        stream.load_state_dict(state)
        it = iter(stream)
        mid += [next(it)["id"] for _ in range(5)]
    last = RowStream(lines, **opts)
    last.load_state_dict(run_state([s.state_dict() for s in new]))
    again = delivered + mid + ids(last)
    assert set(again) == set(range(520)) and (equalize != "none" or len(again) == 520)


def test_bad_states_and_sources_are_refused(lines, volume):
    stream = RowStream(lines, rank=0, world_size=2)
    with pytest.raises(StateError, match="saved by stream .* to resume on another grid"):
        other = RowStream(lines, rank=1, world_size=2)
        other.load_state_dict(stream.state_dict())
        list(other)
    with pytest.raises(StateError, match="gather the state_dict\\(\\) of every stream"):
        resumed = RowStream(lines)
        resumed.load_state_dict(run_state([stream.state_dict()]))
        list(resumed)
    volume.write("f/a.bin", b"x")
    with pytest.raises(OptionError, match="RowStream reads a table's rows.*FileStream"):
        RowStream(volume.path("f"))


def test_skipped_records_are_listed_and_a_resume_does_not_deliver_them(volume, monkeypatch):
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 400)
    lines = [json.dumps({"id": i}) for i in range(100)]
    lines[10], lines[60] = "{oops", "]"
    volume.write("d/a.jsonl", "\n".join(lines) + "\n")
    stream = RowStream(volume.path("d"), on_error="skip")
    it = iter(stream)
    head = [next(it)["id"] for _ in range(30)]
    state = stream.state_dict()
    assert state["skipped"] == [f"{volume.path('d')}/a.jsonl, line 11"]
    resumed = RowStream(volume.path("d"), on_error="skip")
    resumed.load_state_dict(state)
    assert head + ids(resumed) == [i for i in range(100) if i not in (10, 60)]
    assert resumed.skipped == [f"{volume.path('d')}/a.jsonl, line {n}" for n in (11, 61)]


def test_the_schema_is_worked_out_when_the_stream_is_made(volume):
    # Once, in the process that makes the stream: DataLoader workers forked from it inherit it.
    volume.write("s/a.jsonl", '{"id": 1, "label": "cat"}\n{"id": 2, "label": 3}\n')
    with pytest.raises(RecordError, match=r"s/a\.jsonl, line 2: the records .* disagree"):
        RowStream(volume.path("s"))
