"""JSON Lines, CSV and text: a row per record through every front door, large files shared at record boundaries."""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
import time

import subprocess
import sys

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import air_hf  # noqa: F401 - registers uc-volume
from air_core import OptionError, resolve_source
from air_core.io.cache import Cache
from air_core.errors import RecordError
from air_core.planning.shares import Planning
from air_core.read import line_spans, lines
from air_hf import split_for_rank


def _records(n: int, start: int = 0, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"id": start + i, "messages": [{"role": "user", "content": "x" * rng.randrange(0, 300)}],
             "score": rng.random()} for i in range(n)]


def _jsonl(records: list[dict], newline: str = "\n", last_newline: bool = True) -> str:
    text = newline.join(json.dumps(r) for r in records)
    return text + newline if last_newline else text


@pytest.fixture
def small_spans(monkeypatch):
    """Spans of 2,000 bytes, so small files are cut into many."""
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 2000)


def _ids(tables) -> list[int]:
    return [i for t in tables for i in t.column("id").to_pylist()]


def _read_share(source, rank: int, world_size: int, rows: bool = False, **plan) -> list[int]:
    """The ids of a rank's share, from its tables, or (`rows`) from its Python rows."""
    reader = source.reader
    epoch = plan.pop("epoch", 0)
    planning = Planning(plan.pop("seed", 0), plan.pop("shuffle", False), equalize=plan.pop("equalize", "none"))
    _, pieces = reader.share(rank, world_size, planning, epoch=epoch)
    options = dict(columns=None, fetch_threads=4, planning=planning, epoch=epoch, **plan)
    if rows:
        return [r["id"] for _, got in reader.read_rows(pieces, Cache(), **options) for r in got]
    return _ids(reader.read_tables(pieces, Cache(), **options))


# -- spans: every record once, whoever reads it -----------------------------------------

@pytest.mark.parametrize("span_bytes", [1, 7, 64, 333, 1000, 100_000])
@pytest.mark.parametrize("newline,last", [("\n", True), ("\n", False), ("\r\n", True)])
def test_every_record_belongs_to_exactly_one_span(volume, monkeypatch, span_bytes, newline, last):
    monkeypatch.setattr(line_spans, "SPAN_BYTES", span_bytes)
    records = _records(40)
    volume.write("d/a.jsonl", _jsonl(records, newline, last))
    source = resolve_source(volume.path("d"))
    units = source.reader.units()
    assert len(units) == -(-os.path.getsize(volume.local("d/a.jsonl")) // span_bytes) or span_bytes > 10_000
    got = _ids(source.reader.read_tables(units, Cache(), columns=None, fetch_threads=4))
    assert got == list(range(40))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=30), st.integers(1, 7))
def test_the_span_table_holds_what_cutting_each_file_gives(files, span_bytes):
    sizes, whole = [s for s, _ in files], [w for _, w in files]
    expected = []
    for f, (size, one) in enumerate(files):
        if one or size <= span_bytes:
            expected += [line_spans.Span(f, 0, 0, size, whole=one)] if size else []
        else:
            expected += [line_spans.Span(f, k, k * span_bytes, min(size, (k + 1) * span_bytes))
                         for k in range(-(-size // span_bytes))]
    table = line_spans.Spans(np.array(sizes, dtype=np.int64), np.array(whole, dtype=bool), span_bytes)
    assert list(table) == expected and len(table) == len(expected)
    assert table.nbytes().tolist() == [u.nbytes for u in expected]
    assert list(table.firsts()) == [u for u in expected if u.index == 0]
    chosen = sorted(set(range(0, len(files), 2)))
    assert table.of_files(chosen) == [u for u in expected if u.file in chosen]


def test_a_record_longer_than_several_spans_is_read_once(volume, monkeypatch):
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 100)
    records = [{"id": 0, "t": "a"}, {"id": 1, "t": "b" * 5000}, {"id": 2, "t": "c"}]
    volume.write("d/a.jsonl", _jsonl(records))
    source = resolve_source(volume.path("d"))
    tables = list(source.reader.read_tables(source.reader.units(), Cache(), columns=None, fetch_threads=4))
    assert [r["t"] for t in tables for r in t.to_pylist()] == ["a", "b" * 5000, "c"]


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_ranks_share_one_large_file_by_bytes_each_record_once(volume, small_spans, world_size):
    volume.write("d/big.jsonl", _jsonl(_records(600)))
    source = resolve_source(volume.path("d"))
    shares = [_read_share(source, r, world_size) for r in range(world_size)]
    assert sorted(i for s in shares for i in s) == list(range(600))
    weights = source.reader.share_weights(0, world_size, equalize="none")
    per_rank = [sum(int(weights[k]) for k in source.reader.share(r, world_size, Planning(), epoch=0)[0])
                for r in range(world_size)]
    assert max(per_rank) - min(per_rank) <= 2000  # within one span


@pytest.mark.parametrize("equalize", ["pad", "drop"])
def test_equalize_gives_every_rank_as_many_rows(volume, small_spans, equalize):
    volume.write("d/big.jsonl", _jsonl(_records(500)))
    volume.write("d/small.jsonl", _jsonl(_records(7, start=500)))
    source = resolve_source(volume.path("d"))
    shares = [_read_share(source, r, 3, equalize=equalize) for r in range(3)]
    assert len({len(s) for s in shares}) == 1
    seen = [i for s in shares for i in s]
    if equalize == "drop":
        assert len(set(seen)) == len(seen) == 3 * (507 // 3)
    else:
        assert set(seen) == set(range(507)) and len(seen) == 3 * -(-507 // 3)


def test_shuffle_is_seeded_per_epoch_across_and_inside_spans(volume, small_spans):
    volume.write("d/big.jsonl", _jsonl(_records(300)))
    source = resolve_source(volume.path("d"))
    first = _read_share(source, 0, 1, shuffle=True, seed=3, epoch=0)
    assert sorted(first) == list(range(300)) and first != list(range(300))
    # Spans reordered alone would leave each span's records ascending: a descent at most between two spans.
    assert sum(b < a for a, b in zip(first, first[1:])) > len(source.reader.units())
    assert _read_share(source, 0, 1, shuffle=True, seed=3, epoch=0) == first
    assert _read_share(source, 0, 1, shuffle=True, seed=3, epoch=1) != first
    assert _read_share(source, 0, 1, rows=True, shuffle=True, seed=3, epoch=0) == first  # Python rows alike


# -- formats -------------------------------------------------------------------------------

def test_auto_picks_json_lines_and_infers_nested_features(volume):
    volume.write("d/a.jsonl", _jsonl(_records(5)))
    volume.write("d/b.ndjson", _jsonl(_records(5, start=5)))
    source = resolve_source(volume.path("d"))
    assert source.mode == "json"
    schema = source.reader.schema()
    assert schema.field("messages").type == pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    assert schema.field("id").type == pa.int64()


def test_auto_keeps_txt_and_json_files_as_files_and_refuses_a_mix(volume):
    volume.write("t/a.txt", "x\n")
    volume.write("j/a.json", '{"a": 1}\n')
    assert resolve_source(volume.path("t")).mode == "files"
    assert resolve_source(volume.path("j")).mode == "files"
    assert resolve_source(volume.path("j"), mode="json").mode == "json"
    volume.write("m/a.jsonl", '{"a": 1}\n')
    volume.write("m/README.md", "hello\n")
    with pytest.raises(OptionError, match=r"mixes JSON Lines files .*a\.jsonl.* with other files .*README\.md.*"
                                          r"file_extensions=.*mode='files'"):
        resolve_source(volume.path("m"))
    with pytest.raises(OptionError, match=r"mode='csv' but .* holds other files"):
        resolve_source(volume.path("m"), mode="csv")


def test_compressed_json_lines_read_whole_and_decompressed(volume, small_spans):
    import pyarrow as pa

    volume.write("d/a.jsonl.gz", gzip.compress(_jsonl(_records(200)).encode()))
    raw = pa.BufferOutputStream()
    with pa.CompressedOutputStream(raw, "zstd") as out:
        out.write(_jsonl(_records(100, start=200)).encode())
    volume.write("d/b.jsonl.zst", raw.getvalue().to_pybytes())
    source = resolve_source(volume.path("d"))
    assert source.mode == "json"
    assert [u.whole for u in source.reader.units()] == [True, True]
    assert sorted(_read_share(source, 0, 1)) == list(range(300))


def test_csv_and_tsv_rows_with_one_header(volume, small_spans):
    rows = "".join(f"{i},name {i},{i / 2}\n" for i in range(300))
    volume.write("c/a.csv", "id,name,half\n" + rows)
    volume.write("c/b.csv", "id,name,half\n" + "".join(f"{i},n,{i}\n" for i in range(300, 310)))
    source = resolve_source(volume.path("c"))
    assert source.mode == "csv" and source.reader.schema().names == ["id", "name", "half"]
    assert sorted(_read_share(source, 0, 1)) == list(range(310))
    assert sorted(_read_share(source, 1, 2) + _read_share(source, 0, 2)) == list(range(310))
    volume.write("t/a.tsv", "id\tname\n1\tx\n2\ty\n")
    tsv = resolve_source(volume.path("t"))
    assert _read_share(tsv, 0, 1) == [1, 2]
    volume.write("s/a.csv", "id;name\n1;x\n")
    assert _read_share(resolve_source(volume.path("s"), delimiter=";"), 0, 1) == [1]


def test_csv_files_with_different_headers_are_refused_up_front(volume):
    volume.write("c/a.csv", "id,name\n1,x\n")
    volume.write("c/b.csv", "id,title\n2,y\n")
    with pytest.raises(OptionError, match=r"b\.csv and .*a\.csv have different headers.*\['id', 'title'\]"):
        resolve_source(volume.path("c"))


@pytest.mark.parametrize("sample_by,expected", [
    ("line", ["first line", "second", "", "third after a blank", "last"]),
    ("paragraph", ["first line\nsecond", "third after a blank\nlast\n"]),
    ("document", ["first line\nsecond\n\nthird after a blank\nlast\n"]),
])
def test_text_rows_by_line_paragraph_or_document(volume, sample_by, expected):
    volume.write("t/a.txt", "first line\nsecond\n\nthird after a blank\r\nlast\n".replace("\r\n", "\n"))
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("t"), mode="text", sample_by=sample_by,
                               streaming=True, split="train")
    assert [r["text"] for r in ds] == expected
    assert ds.features == datasets.Features({"text": datasets.Value("string")})


def test_text_lines_are_shared_at_line_boundaries(volume, small_spans):
    lines = [f"line {i} " + "w" * (i % 97) for i in range(500)]
    volume.write("t/a.log", "\n".join(lines) + "\n")
    source = resolve_source(volume.path("t"), mode="text")
    got = []
    for rank in range(3):
        _, pieces = source.reader.share(rank, 3, Planning(), epoch=0)
        got += [s for t in source.reader.read_tables(pieces, Cache(), columns=None, fetch_threads=2)
                for s in t.column("text").to_pylist()]
    assert sorted(got) == sorted(lines)


# -- inferred types: the same first bytes on every process, read by range -----------------------------

def _varied(n: int) -> list[dict]:
    """Records whose fields vary from one to the next (a field now and then, a null, nested keys of two kinds),
    every variant within the first few: types a sample of the start of the file sees in full."""
    out = []
    for i, r in enumerate(_records(n)):
        if i % 3 == 1:
            r["tag"] = f"t{i % 7}"
        if i % 4 == 2:
            r["score"] = None
        r["meta"] = {"lang": "en"} if i % 2 else {"lang": "fr", "n": i}
        out.append(r)
    return out


def _node_bytes() -> int:
    return Cache(os.environ["AIR_CACHE_DIR"]).info()["bytes"]


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz"])
def test_types_come_from_a_prefix_read_by_range_equal_to_the_first_spans(volume, monkeypatch, name):
    monkeypatch.setattr(lines, "SAMPLE_BYTES", 8000)
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 40_000)
    text = _jsonl(_varied(1000)).encode()
    volume.write(f"d/{name}", gzip.compress(text) if name.endswith(".gz") else text)
    source = resolve_source(volume.path("d"))
    first_span = text[:text.rfind(b"\n", 0, 40_000) + 1]
    assert source.reader.schema() == pj.read_json(pa.BufferReader(first_span)).schema
    # The prefix alone was read (a compressed file's first bytes, decompressed as far as they go), not the span.
    assert _node_bytes() == 8000
    assert sorted(_read_share(source, 0, 1)) == list(range(1000))


def test_csv_types_come_from_a_prefix_read_by_range(volume, monkeypatch):
    monkeypatch.setattr(lines, "SAMPLE_BYTES", 4000)
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 30_000)
    volume.write("c/a.csv", "id,name,half\n" + "".join(f"{i},name {i},{i / 2}\n" for i in range(3000)))
    source = resolve_source(volume.path("c"))
    assert source.reader.schema() == pa.schema([("id", pa.int64()), ("name", pa.string()), ("half", pa.float64())])
    assert _node_bytes() == 4000
    assert sorted(_read_share(source, 0, 1)) == list(range(3000))


def test_a_compressed_file_gives_the_sample_its_decompressed_bytes(volume, monkeypatch):
    monkeypatch.setattr(lines, "SAMPLE_BYTES", 8000)
    records = [{"id": i, "x": "a" * 50, **({"tag": "t"} if i == 60 else {})} for i in range(1000)]
    data = gzip.compress(_jsonl(records).encode())
    assert len(data) < 8000
    volume.write("d/a.jsonl.gz", data)
    # The file whole (its own entry, read later for its records) is 8,000 bytes of records decompressed: record 60
    # among them, as 8,000 bytes of a file not compressed would hold it.
    assert resolve_source(volume.path("d")).reader.schema().names == ["id", "x", "tag"]
    assert _node_bytes() == len(data)


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz"])
def test_a_first_record_longer_than_the_prefix_is_read_whole_for_its_types(volume, monkeypatch, name):
    monkeypatch.setattr(lines, "SAMPLE_BYTES", 1000)
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 200_000)
    first = {"id": 0, "doc": {"text": os.urandom(3000).hex(), "pages": [1, 2]}, "score": 0.5}
    text = _jsonl([first] + [{"id": i, "doc": {"text": "x", "pages": []}, "score": 1.0} for i in range(1, 5000)])
    data = gzip.compress(text.encode()) if name.endswith(".gz") else text.encode()
    volume.write(f"d/{name}", data)
    source = resolve_source(volume.path("d"))
    assert source.reader.schema() == pj.read_json(pa.BufferReader(_jsonl([first]).encode())).schema
    # Ranges that double read on to the record's end: [0, 1000), [1000, 2000), ... [4000, 8000).
    assert _node_bytes() <= 8000 < len(data)
    assert sorted(_read_share(source, 0, 1)) == list(range(5000))


def test_small_files_are_sampled_whole_as_their_own_entries(volume, monkeypatch):
    monkeypatch.setattr(lines, "SAMPLE_BYTES", 5000)
    for k in range(20):
        volume.write(f"d/{k:02d}.jsonl", _jsonl(_varied(10)))
    source = resolve_source(volume.path("d"))
    size = os.path.getsize(volume.local("d/00.jsonl"))
    assert source.reader.schema() == pj.read_json(volume.local("d/00.jsonl")).schema
    # The first files whole (each the entry its span reads later), the last one's first bytes: 5,000 in all.
    assert Cache(os.environ["AIR_CACHE_DIR"]).info()["entries"] == -(-5000 // size)
    assert _node_bytes() == 5000


@pytest.mark.slow
def test_ranks_on_separate_nodes_read_their_shares_and_one_prefix_each(volume, netvol_so, tmp_path):
    # Before, every rank read the file's first span whole to infer its types: the rank that does not own it read
    # it besides its share (4 MiB here: 1.33x the data over both ranks).
    volume.write("d/big.jsonl", _jsonl(_varied(60_000)))
    size = os.path.getsize(volume.local("d/big.jsonl"))
    assert size > 3 * (4 << 20)
    code = ("import sys; from air_core.read import line_spans; line_spans.SPAN_BYTES = 4 << 20\n"
            "from air_core import RowStream\n"
            "stream = RowStream(sys.argv[1], rank=int(sys.argv[2]), world_size=2)\n"
            "print(sum(t.num_rows for t in stream.tables()))")
    procs = []
    for rank in range(2):
        env = {**os.environ, "LD_PRELOAD": netvol_so, "NETVOL_PREFIX": f"{volume.root}/", "NETVOL_OPEN_MS": "10",
               "NETVOL_MBPS": "200", "NETVOL_TRACE": str(tmp_path / f"trace{rank}"), "NETVOL_TRACE_BYTES": "1",
               "AIR_CACHE_DIR": str(tmp_path / f"node{rank}")}
        procs.append(subprocess.Popen([sys.executable, "-c", code, volume.path("d"), str(rank)], env=env,
                                      stdout=subprocess.PIPE, text=True))
    rows = [int(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs) and sum(rows) == 60_000 and min(rows) > 0
    read = sum(int(line.rsplit(" ", 1)[1]) for rank in range(2)
               for line in (tmp_path / f"trace{rank}").read_text().splitlines() if line.startswith("read "))
    assert read <= 1.05 * size + 2 * lines.SAMPLE_BYTES, read / size


# -- options -----------------------------------------------------------------------------------

def test_format_options_are_refused_where_they_do_not_apply(volume):
    volume.write("d/a.jsonl", '{"a": 1}\n')
    volume.write("f/a.bin", b"x")
    with pytest.raises(OptionError, match=r"delimiter= applies to mode 'csv': .*/d is read in mode 'json'"):
        resolve_source(volume.path("d"), delimiter=";")
    with pytest.raises(OptionError, match=r"sample_by= applies to mode 'text'"):
        resolve_source(volume.path("d"), sample_by="line")
    with pytest.raises(OptionError, match=r"schema= applies to mode .*'json'.*: .*/f is read in mode 'files'"):
        resolve_source(volume.path("f"), schema=pa.schema([("a", pa.int64())]))
    with pytest.raises(OptionError, match=r"sample_by='sentence': choose one of"):
        resolve_source(volume.path("d"), mode="text", sample_by="sentence")
    with pytest.raises(OptionError, match=r"decode= applies to files mode: .*records"):
        datasets.load_dataset("uc-volume", data_dir=volume.path("d"), decode="text", streaming=True)


# -- bad records -----------------------------------------------------------------------------

@pytest.mark.parametrize("rows", [False, True])
def test_a_malformed_record_names_file_line_and_offset(volume, small_spans, rows):
    lines = [json.dumps(r) for r in _records(100)]
    lines[73] = '{"id": 73, "messages": [}'
    volume.write("d/a.jsonl", "\n".join(lines) + "\n")
    offset = sum(len(x) + 1 for x in lines[:73])
    source = resolve_source(volume.path("d"))
    with pytest.raises(RecordError, match=rf"/d/a\.jsonl, line 74 \(byte offset {offset}\): not a valid JSON "
                                          r"object.*on_error='skip'"):
        _read_share(source, 0, 1, rows)


@pytest.mark.parametrize("rows", [False, True])
def test_a_malformed_record_anywhere_around_a_cut_is_named_and_skipped(volume, small_spans, rows):
    # A span's records are parsed in place in its cached copy, its last one joined to its run-on: a bad record
    # on either side of that seam, or first after a cut, is found and said the same.
    lines = [json.dumps({"id": i, "pad": "p" * 90}) for i in range(120)]
    starts = np.cumsum([0] + [len(x) + 1 for x in lines])
    seams = sorted({int(np.searchsorted(starts, cut, side="right")) - 1 + d
                    for cut in range(2000, int(starts[-1]), 2000) for d in (-1, 0, 1)})
    for bad in seams:
        broken = list(lines)
        broken[bad] = '{"id": ' + str(bad) + ', "pad": '
        volume.write(f"d{bad}/a.jsonl", "\n".join(broken) + "\n")
        with pytest.raises(RecordError, match=rf"a\.jsonl, line {bad + 1} \(byte offset {starts[bad]}\)"):
            _read_share(resolve_source(volume.path(f"d{bad}")), 0, 1, rows)
        got = _read_share(resolve_source(volume.path(f"d{bad}")), 0, 1, rows, on_error="skip")
        assert got == [i for i in range(120) if i != bad]


def test_a_field_of_another_type_names_it_and_suggests_features(volume):
    pad = "p" * 600  # 2,000 records past the sample the features are inferred from
    lines = [json.dumps({"id": i, "label": "cat", "pad": pad}) for i in range(2000)] + [
        f'{{"id": 2000, "label": 7, "pad": "{pad}"}}']
    volume.write("d/a.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(RecordError, match=r"a\.jsonl, line 2001 .*field 'label' holds a number where the features "
                                          r"have a string.*features="):
        list(datasets.load_dataset("uc-volume", data_dir=volume.path("d"), streaming=True, split="train"))
    volume.write("s/a.jsonl", '{"id": 1, "label": "cat"}\n\n{"id": 2, "label": 3}\n')
    with pytest.raises(RecordError, match=r"s/a\.jsonl, line 3: the records .* disagree: field 'label' holds a "
                                          r"number here, a string before.*features="):
        resolve_source(volume.path("s")).reader.schema()
    volume.write("e/a.jsonl", '{"id": 1}\n{"id": 2, "extra": true}\n')
    features = datasets.Features({"id": datasets.Value("int64")})
    with pytest.raises(RecordError, match=r"line 2 .*field 'extra' is not among the features \['id'\]"):
        list(datasets.load_dataset("uc-volume", data_dir=volume.path("e"), features=features, streaming=True,
                                   split="train"))


def test_features_given_parse_the_records_as_them(volume):
    volume.write("d/a.jsonl", '{"id": 1, "label": 3}\n{"id": 2, "label": 7.5}\n')
    features = datasets.Features({"id": datasets.Value("int32"), "label": datasets.Value("float64")})
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("d"), features=features, streaming=True,
                               split="train")
    assert list(ds) == [{"id": 1, "label": 3.0}, {"id": 2, "label": 7.5}]


def test_on_error_skip_leaves_out_malformed_records_with_a_warning(volume, small_spans, caplog):
    lines = [json.dumps({"id": i}) for i in range(200)]
    lines[5], lines[150] = "not json", '{"id": '
    volume.write("d/a.jsonl", "\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="air_core"):
        ds = datasets.load_dataset("uc-volume", data_dir=volume.path("d"), on_error="skip", streaming=True,
                                   split="train")
        got = [r["id"] for r in ds]
    assert got == [i for i in range(200) if i not in (5, 150)]
    assert any("line 6 " in m for m in caplog.messages) and any("line 151 " in m for m in caplog.messages)


# -- front doors -----------------------------------------------------------------------------

def test_hf_streaming_ranks_read_each_record_once_from_one_file(volume, small_spans):
    volume.write("d/big.jsonl", _jsonl(_records(400)))
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("d"), streaming=True, split="train",
                               world_size=2, num_workers=2)
    assert ds.num_shards == 4
    ranks = [[r["id"] for r in split_for_rank(ds, rank=k, world_size=2)] for k in range(2)]
    assert sorted(ranks[0] + ranks[1]) == list(range(400)) and ranks[0] and ranks[1]


def test_hf_non_streaming_load_and_columns(volume, small_spans, tmp_path):
    volume.write("d/big.jsonl", _jsonl(_records(120)))
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("d"), split="train", columns=["id"],
                               cache_dir=str(tmp_path / "hf"))
    assert ds.column_names == ["id"] and sorted(ds["id"]) == list(range(120))


def test_hf_columns_beside_features_keep_the_chosen_columns_on_every_path(volume, tmp_path):
    volume.write("d/a.jsonl", '{"id": 1, "label": 0, "score": 0.5}\n{"id": 2, "label": 1, "score": 1.5}\n')
    features = datasets.Features({"id": datasets.Value("int64"), "label": datasets.ClassLabel(names=["no", "yes"]),
                                  "score": datasets.Value("float64")})
    chosen = datasets.Features({"label": features["label"], "id": features["id"]})
    rows = [{"label": 0, "id": 1}, {"label": 1, "id": 2}]
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("d"), split="train", streaming=True,
                               features=features, columns=["label", "id"])
    assert ds.features == chosen and list(ds) == rows
    assert next(ds.with_format("arrow").iter(batch_size=10)).to_pylist() == rows
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("d"), split="train", features=features,
                               columns=["label", "id"], cache_dir=str(tmp_path / "hf"))
    assert ds.features == chosen and ds.column_names == ["label", "id"] and ds.to_list() == rows


def test_hf_equalize_drop_gives_shards_equal_counts(volume, small_spans):
    volume.write("d/big.jsonl", _jsonl(_records(301)))
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("d"), streaming=True, split="train",
                               world_size=2, num_workers=1, equalize="drop")
    counts = [sum(1 for _ in split_for_rank(ds, rank=k, world_size=2)) for k in range(2)]
    assert counts == [150, 150]


def test_second_pass_reads_nothing_from_the_volume(volume, small_spans):
    local = volume.write("d/big.jsonl", _jsonl(_records(300)))
    load = lambda: [r["id"] for r in datasets.load_dataset(  # noqa: E731
        "uc-volume", data_dir=volume.path("d"), streaming=True, split="train")]
    assert sorted(load()) == list(range(300))
    # The same size and time, other bytes: a read from the volume would now fail to parse.
    st = local.stat()
    local.write_bytes(b"#" * st.st_size)
    os.utime(local, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert sorted(load()) == list(range(300))


def test_a_read_after_cache_hits_is_not_hedged_by_their_speed(volume, monkeypatch):
    # A hit takes microseconds: had it set the hedging deadline (its floor, 0.15 s), the slow read of the
    # second file that follows would be hedged, and its bytes read from the volume twice.
    from air_core import RowStream

    volume.write("d/a.jsonl", _jsonl(_records(50)))
    volume.write("d/b.jsonl", _jsonl(_records(50, start=50)))
    first = RowStream(volume.path("d"), include="a.jsonl")
    assert len(list(first)) == 50  # a.jsonl is cached now
    send = os.sendfile
    reads: list[int] = []

    def slow(out, in_, offset, count):
        reads.append(offset)
        time.sleep(0.5)
        return send(out, in_, offset, count)

    monkeypatch.setattr(os, "sendfile", slow)
    stream = RowStream(volume.path("d"), schema=first.schema)  # no sample to infer from: b.jsonl is unread
    assert sorted(r["id"] for r in stream) == list(range(100))
    assert (stream.cache.stats.hits, stream.cache.stats.misses, stream.cache.stats.hedged) == (1, 1, 0)
    assert reads == [0]


@pytest.mark.slow
def test_ray_read_datasource_rows_columns_and_count(volume, small_spans, ray_cluster):
    from air_ray import UCVolumeDatasource, read_uc_volume

    volume.write("d/big.jsonl", _jsonl(_records(300)))
    volume.write("d/small.jsonl", _jsonl(_records(10, start=300)))
    ds = ray_cluster.data.read_datasource(UCVolumeDatasource(volume.path("d")))
    rows = ds.take_all()
    assert sorted(r["id"] for r in rows) == list(range(310))
    assert ds.count() == 310
    picked = read_uc_volume(volume.path("d"), columns=["id", "score"])
    assert picked.schema().names == ["id", "score"] and picked.count() == 310
    two = [sorted(r["id"] for r in ray_cluster.data.read_datasource(
        UCVolumeDatasource(volume.path("d"), rank=k, world_size=2, equalize="pad")).take_all()) for k in range(2)]
    assert len(two[0]) == len(two[1]) == 155 and set(two[0]) | set(two[1]) == set(range(310))


def test_hf_state_dict_resumes_mid_span_exactly(volume, small_spans):
    volume.write("d/big.jsonl", _jsonl(_records(300)))

    def load():
        return datasets.load_dataset("uc-volume", data_dir=volume.path("d"), streaming=True, split="train",
                                     shuffle=True, seed=5, num_workers=2)

    full = [r["id"] for r in load()]
    ds = load()
    it = iter(ds)
    head = [next(it)["id"] for _ in range(117)]
    state = ds.state_dict()
    resumed = load()
    resumed.load_state_dict(state)
    assert head + [r["id"] for r in resumed] == full


@pytest.mark.slow
def test_dataloader_workers_share_one_file_and_resume(volume, small_spans):
    from torchdata.stateful_dataloader import StatefulDataLoader

    volume.write("d/big.jsonl", _jsonl(_records(400)))
    volume.write("d/small.jsonl.gz", gzip.compress(_jsonl(_records(50, start=400)).encode()))

    def loader():
        ds = datasets.load_dataset("uc-volume", data_dir=volume.path("d"), streaming=True, split="train",
                                   num_workers=2)
        return StatefulDataLoader(ds, batch_size=7, num_workers=2, collate_fn=lambda rows: [r["id"] for r in rows])

    full = [i for batch in loader() for i in batch]
    assert sorted(full) == list(range(450))
    first = loader()
    it = iter(first)
    head = [i for _ in range(9) for i in next(it)]
    state = first.state_dict()
    second = loader()
    second.load_state_dict(state)
    assert head + [i for batch in second for i in batch] == full


def test_what_a_source_works_out_follows_its_mode_and_options(volume):
    volume.write("c/a.csv", "x;y\n1;2\n")
    assert resolve_source(volume.path("c"), mode="csv").reader.schema().names == ["x;y"]
    assert resolve_source(volume.path("c"), mode="csv", delimiter=";").reader.schema().names == ["x", "y"]
    assert resolve_source(volume.path("c"), mode="text").reader.units()[0].whole is False
