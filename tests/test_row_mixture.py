"""Mixtures of tables through RowStream(sources=[...]): each source's rows per epoch exactly, over a grid, every row
once before any twice, equal counts, resume on other grids past the first epoch, and each refusal."""

import json
import pickle
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from air_core import OptionError, RowStream, StateError, run_state
from air_core.mixed_table import resolve_tables
from air_core.planning.shares import Planning
from air_core.read import line_spans

BASE = {"chat": 0, "code": 1000, "safety": 2000}


@pytest.fixture
def tables(volume, monkeypatch):
    """chat: 3 Parquet files of 40 rows in row groups of 15; code: 2 JSON Lines files of 25 rows in spans of
    ~300 bytes; safety: one Parquet file of 7 rows. Rows {"id", "src"}, ids unique."""
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 300)
    for f in range(3):
        ids = list(range(40 * f, 40 * (f + 1)))
        path = volume.local(f"chat/part-{f}.parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": ids, "src": ["chat"] * len(ids)}), path, row_group_size=15)
    for f in range(2):
        volume.write(f"code/part-{f}.jsonl", "".join(json.dumps({"id": 1000 + 25 * f + i, "src": "code"}) + "\n"
                                                    for i in range(25)))
    path = volume.local("safety/part-0.parquet")
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"id": list(range(2000, 2007)), "src": ["safety"] * 7}), path)
    return volume


def specs(volume, kind, weights):
    return [{"path": volume.path(name), kind: w} for name, w in zip(("chat", "code", "safety"), weights)]


def grid_rows(sources, world_size, num_workers, epoch, **opts):
    """Every stream's ids of `epoch`, by (rank, worker)."""
    out = {}
    for r in range(world_size):
        for w in range(num_workers):
            s = RowStream(sources=sources, rank=r, world_size=world_size, worker=w, num_workers=num_workers, **opts)
            s.set_epoch(epoch)
            out[r, w] = [row["id"] for row in s]
    return out


def source_of(i):
    return "chat" if i < 1000 else "code" if i < 2000 else "safety"


@pytest.mark.parametrize("kind, weights, epoch_size, want", [
    ("proportion", [0.6, 0.3, 0.1], 100, {"chat": 60, "code": 30, "safety": 10}),
    ("repeat", [0.5, 1, 3], None, {"chat": 60, "code": 50, "safety": 21}),
    ("choose", [50, 20, 7], None, {"chat": 50, "code": 20, "safety": 7}),
])
def test_each_epoch_reads_each_sources_rows_exactly_over_the_grid(tables, kind, weights, epoch_size, want):
    sources = specs(tables, kind, weights)
    safety = Counter()
    for epoch in range(3):
        got = grid_rows(sources, 2, 2, epoch, shuffle=True, seed=3, epoch_size=epoch_size)
        rows = [i for part in got.values() for i in part]
        assert Counter(map(source_of, rows)) == want
        single = RowStream(sources=sources, shuffle=True, seed=3, epoch_size=epoch_size)
        single.set_epoch(epoch)
        assert Counter(row["id"] for row in single) == Counter(rows)  # one stream reads the grid's multiset
        safety.update(i for i in rows if source_of(i) == "safety")
    if kind == "repeat":  # 7 rows, 3 times each per epoch
        assert set(safety.values()) == {9}


def test_a_large_source_is_read_without_repeats_until_it_is_exhausted(tables):
    sources = specs(tables, "choose", [50, 20, 7])
    seen = Counter()
    for epoch in range(3):
        got = grid_rows(sources, 3, 1, epoch, shuffle=True)
        seen.update(i for part in got.values() for i in part if source_of(i) != "safety")
        counts = Counter(seen[i] for i in list(range(120)) + list(range(1000, 1050)))
        assert max(counts) - min(counts) <= 1  # every row once before any twice, in each source
    assert sum(1 for i in range(120) if seen[i]) == 120  # 150 of chat's 120 rows in 3 epochs: all, 30 twice


def test_equalize_gives_every_rank_as_many_rows(tables):
    sources = specs(tables, "repeat", [0.5, 1, 3])  # 131 rows over 4 ranks
    for equalize, per_rank in (("pad", 33), ("drop", 32)):
        got = grid_rows(sources, 4, 2, 1, shuffle=True, equalize=equalize)
        counts = Counter()
        for (r, _), rows in got.items():
            counts[r] += len(rows)
        assert set(counts.values()) == {per_rank}


def test_a_ranks_rows_stay_on_it_from_epoch_to_epoch_where_its_share_does(tables):
    sources = specs(tables, "repeat", [1, 1, 1])  # every epoch the same rows: each on the same rank
    first = {r: set(rows) for (r, _), rows in grid_rows(sources, 3, 1, 0, shuffle=True).items()}
    second = {r: set(rows) for (r, _), rows in grid_rows(sources, 3, 1, 1, shuffle=True).items()}
    assert first == second


def source_runs(ids):
    """The lengths of the runs of consecutive rows from one source."""
    runs = []
    for i, src in enumerate(map(source_of, ids)):
        if i and src == source_of(ids[i - 1]):
            runs[-1] += 1
        else:
            runs.append(1)
    return runs


def test_a_shuffled_stream_interleaves_the_sources_row_by_row(tables):
    sources = specs(tables, "choose", [60, 40, 7])
    in_order = RowStream(sources=sources, seed=2)
    in_order.set_epoch(1)
    plain = [row["id"] for row in in_order]
    assert max(source_runs(plain)) >= 15  # a run of rows (a row group, a span) at a time
    shuffled = RowStream(sources=sources, shuffle=True, seed=2)
    shuffled.set_epoch(1)
    ids = [row["id"] for row in shuffled]
    assert Counter(ids) == Counter(plain)  # the epoch's rows, each as often
    runs = source_runs(ids)
    assert len(runs) > 30 and max(runs) < 15  # the sources alternate within runs of rows
    again = RowStream(sources=sources, shuffle=True, seed=2)
    again.set_epoch(1)
    assert [row["id"] for row in again] == ids  # seeded: every process reads the same order


def test_sources_that_differ_only_in_promising_no_nulls_mix(tables):
    no_nulls = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("src", pa.string(), nullable=False)])
    path = tables.local("strict/part-0.parquet")
    path.parent.mkdir()
    pq.write_table(pa.table({"id": list(range(3000, 3012)), "src": ["strict"] * 12}, schema=no_nulls), path,
                   row_group_size=5)
    sources = [{"path": tables.path("code"), "repeat": 1}, {"path": tables.path("strict"), "repeat": 1}]
    ids = [row["id"] for row in RowStream(sources=sources, shuffle=True)]
    assert sorted(ids) == list(range(1000, 1050)) + list(range(3000, 3012))


def read_some(streams, rng, most):
    delivered, states = [], []
    for s in streams:
        it = iter(s)
        delivered += [next(it)["id"] for _ in range(rng.randint(0, most))]
        states.append(s.state_dict())
    return delivered, states


@pytest.mark.parametrize("kind, weights", [("repeat", [0.5, 1, 2.5]), ("choose", [45, 30, 9])])
def test_a_resume_past_the_first_epoch_on_other_grids_is_exactly_once(tables, kind, weights):
    sources = specs(tables, kind, weights)
    opts = dict(sources=sources, shuffle=True, seed=11)
    rng = random.Random(4)
    whole = RowStream(**opts)
    whole.set_epoch(2)
    uninterrupted = Counter(row["id"] for row in whole)
    streams = []
    for r in range(2):
        for w in range(2):
            s = RowStream(rank=r, world_size=2, worker=w, num_workers=2, **opts)
            s.set_epoch(2)
            streams.append(s)
    delivered, states = read_some(streams, rng, 12)
    run = json.loads(json.dumps(run_state(states)))
    assert len(json.dumps(run)) < 2000  # counts, not row lists
    streams = []
    for w in range(3):  # on 1 rank x 3 workers, each stream pickled as to a worker, stopped again
        s = RowStream(rank=0, world_size=1, worker=w, num_workers=3, **opts)
        s.load_state_dict(run)
        streams.append(pickle.loads(pickle.dumps(s)))
    more, states = read_some(streams, rng, 10)
    delivered += more
    run2 = run_state(states)
    for r in range(3):  # then on 3 ranks x 1 worker, to the end of the epoch
        s = RowStream(rank=r, world_size=3, **opts)
        s.load_state_dict(run2)
        assert s.epoch == 2
        delivered += [row["id"] for row in s]
    assert Counter(delivered) == uninterrupted


def test_a_delta_table_is_a_source_exported_to_its_path(tables, tmp_path):
    pytest.importorskip("deltalake")
    from deltalake import write_deltalake

    from air_core import FileStream

    table = tmp_path / "delta" / "safety"
    write_deltalake(str(table), pa.table({"id": list(range(3000, 3012)), "src": ["delta"] * 12}))
    sources = [{"path": tables.path("code"), "repeat": 0.6},
               {"path": tables.path("exports/safety"), "delta_table": str(table), "delta_version": 0, "repeat": 2}]
    stream = RowStream(sources=sources, shuffle=True, seed=1)
    got = Counter(row["src"] for row in stream)
    assert got == {"code": 30, "delta": 24}  # the table's 12 rows twice, exported once to its path
    assert RowStream(tables.path("exports/safety")).schema.names == ["id", "src"]
    with pytest.raises(OptionError, match=r"sources\[1\].*Delta table.*RowStream\(sources="):
        FileStream(sources=[{"path": tables.path("chat"), "repeat": 1}, sources[1]])


def test_a_state_of_another_mixture_is_refused_saying_what_changed(tables):
    state = RowStream(sources=specs(tables, "choose", [10, 10, 7])).state_dict()
    with pytest.raises(StateError, match="saved with 10, 10, 7 items per epoch from the sources, this mixture "
                                         "gives 10, 20, 7"):
        RowStream(sources=specs(tables, "choose", [10, 20, 7])).load_state_dict(state)


def test_sources_of_other_schemas_or_not_tables_are_refused_naming_them(tables):
    tables.write("other/a.jsonl", '{"id": 1, "text": "x"}\n')
    with pytest.raises(OptionError, match=r"sources\[0\] \(.*chat\) holds rows of \(id: int64, src: string\) but "
                                          r"sources\[1\] \(.*other\) of \(id: int64, text: string\)"):
        RowStream(sources=[{"path": tables.path("chat"), "repeat": 1}, {"path": tables.path("other"), "repeat": 1}])
    tables.files("loose", 3)
    with pytest.raises(OptionError, match=r"sources\[1\] \(.*loose\) is read in mode 'files': a mixture of rows"):
        RowStream(sources=[{"path": tables.path("chat"), "repeat": 1}, {"path": tables.path("loose"), "repeat": 1}])
    with pytest.raises(OptionError, match="give mode= in each source's dict"):
        RowStream(sources=specs(tables, "repeat", [1, 1, 1]), mode="parquet")
    with pytest.raises(OptionError, match="epoch_size= sizes the epochs of a mixture"):
        RowStream(tables.path("chat"), epoch_size=10)
    with pytest.raises(OptionError, match=r"sources\[1\] .*: proportion=-1"):
        RowStream(sources=specs(tables, "proportion", [1, -1, 1]))
    with pytest.raises(OptionError, match="give the volume folder of a table to read, path=, or several"):
        RowStream()


def test_columns_are_read_from_every_source_and_a_pickled_stream_is_small(tables):
    stream = RowStream(sources=specs(tables, "choose", [10, 10, 7]), columns=["id"], shuffle=True)
    assert stream.schema.names == ["id"]
    rows = list(pickle.loads(pickle.dumps(stream)))
    assert len(rows) == 27 and all(list(r) == ["id"] for r in rows)
    assert Counter(source_of(r["id"]) for r in rows) == {"chat": 10, "code": 10, "safety": 7}
    assert len(pickle.dumps(stream)) < 20_000  # its sources' listings travel as files, not its units
    with pytest.raises(OptionError, match="nope"):
        RowStream(sources=specs(tables, "choose", [10, 10, 7]), columns=["nope"])


@pytest.mark.parametrize("kind, weights", [("repeat", [0.5, 1, 3]), ("choose", [37, 11, 2]),
                                           ("proportion", [5, 3, 2])])
def test_the_ranks_of_any_grid_share_the_epochs_rows_once_with_equal_counts_when_asked(tables, kind, weights):
    reader = resolve_tables(specs(tables, kind, weights)).reader
    counts = reader.source.counts

    def rows(pieces):
        return Counter((p.source, p.unit, i) for p in pieces for i in range(p.start, p.stop))

    for epoch in (0, 3):
        whole = rows(reader.epoch_pieces(Planning(5), epoch=epoch))
        assert [sum(c for (s, _, _), c in whole.items() if s == k) for k in range(3)] == counts
        for world_size in range(1, 6):
            for equalize in ("none", "pad", "drop"):
                shares = [reader.share(r, world_size, Planning(5, True, equalize=equalize), epoch=epoch)[1]
                          for r in range(world_size)]
                sizes = [sum(p.num_rows for p in share) for share in shares]
                got = sum((rows(share) for share in shares), Counter())
                if equalize == "none":
                    assert got == whole and max(sizes) - min(sizes) <= 1
                else:
                    assert len(set(sizes)) == 1
                    assert (got - whole if equalize == "drop" else whole - got) == Counter()
