"""Arrow tables between processes: an IPC stream each, equal to the table sent, a slice's own rows alone."""

from __future__ import annotations

import json
import pickle
from multiprocessing.reduction import ForkingPickler

import pyarrow as pa
import pytest

from air_core import RowStream, table_pickling
from air_core.read import line_spans


def _table() -> pa.Table:
    first = pa.table({"id": pa.array(range(1000), pa.int64()),
                      "messages": [[{"role": "user", "content": "x" * (i % 300)}] for i in range(1000)],
                      "kind": pa.array(["a", "b"] * 500).dictionary_encode()})
    second = pa.table({"id": pa.array([1000], pa.int64()), "messages": pa.array([[]], first.schema.field(1).type),
                       "kind": pa.array(["c"]).dictionary_encode()})
    return pa.concat_tables([first, second]).replace_schema_metadata({"source": "test"})


def test_tables_cross_equal_as_streams_and_slices_carry_their_rows_alone():
    table_pickling.register()
    table = _table()
    for sent in (table, table.slice(10, 5), table.select([]), table.slice(0, 0)):
        got = pickle.loads(ForkingPickler.dumps(sent))
        assert got.equals(sent) and got.num_rows == sent.num_rows
        assert got.schema.metadata == {b"source": b"test"}
    piece = table.slice(100, 10)
    assert len(ForkingPickler.dumps(piece)) < len(ForkingPickler.dumps(table)) / 20
    assert len(pickle.dumps(piece)) > len(pickle.dumps(table)) / 2  # plain pickle is pyarrow's own, untouched


@pytest.mark.slow
def test_dataloader_workers_hand_over_row_stream_tables_whole(volume, monkeypatch):
    from torch.utils.data import DataLoader, IterableDataset

    monkeypatch.setattr(line_spans, "SPAN_BYTES", 3000)
    volume.write("d/a.jsonl", "".join(json.dumps({"id": i, "t": "y" * (i % 97)}) + "\n" for i in range(2000)))
    path = volume.path("d")

    class Tables(IterableDataset):
        def __iter__(self):
            yield from RowStream(path, rank=0, world_size=1).tables(batch_size=64)

    got = list(DataLoader(Tables(), batch_size=None, num_workers=2))
    assert all(isinstance(t, pa.Table) and t.num_rows <= 64 for t in got)
    assert sorted(i for t in got for i in t.column("id").to_pylist()) == list(range(2000))
    assert pa.concat_tables(got).sort_by("id").equals(
        pa.concat_tables(RowStream(path, rank=0, world_size=1).tables()).sort_by("id"))
