"""JSON Lines as Python rows without a table (`JsonFormat.rows`, `read_rows`): the rows the parse converted gives."""

from __future__ import annotations

import gzip
import json
import logging
import math
import re

import datasets
import pyarrow as pa
import pyarrow.json as pj
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import air_hf  # noqa: F401 - registers uc-volume
from air_core import RowStream, resolve_source
from air_core.errors import RecordError
from air_core.io.cache import Cache
from air_core.planning.shares import Planning
from air_core.read import line_spans, lines
from air_core.read.jsonl import JsonFormat

# -- the rows equal the parse's, value for value and type for type ------------------------------------

LEAVES = [pa.int64(), pa.int32(), pa.uint8(), pa.float64(), pa.bool_(), pa.string(), pa.large_string(), pa.null()]
# Types without an exact msgspec match: their runs are parsed, and the property holds all the same.
OTHERS = [pa.float32(), pa.timestamp("s"), pa.date32()]
NAMES = st.sampled_from(["a", "b", "id", "x y", "é", "", "class", "0"])


def types(depth: int = 2) -> st.SearchStrategy[pa.DataType]:
    leaf = st.sampled_from(LEAVES + OTHERS)
    if not depth:
        return leaf
    inner = types(depth - 1)
    return st.one_of(leaf, leaf, inner.map(pa.list_),  # not large_list: pyarrow's JSON reader refuses it
                     st.lists(st.tuples(NAMES, inner), min_size=1, max_size=3,
                              unique_by=lambda f: f[0]).map(pa.struct))


schemas = st.lists(st.tuples(NAMES, types()), min_size=1, max_size=4, unique_by=lambda f: f[0]).map(pa.schema)

# Any JSON value: where it does not fit the schema's type, both ways refuse the run.
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
anything = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | TEXT
                        | st.floats(allow_nan=False, allow_infinity=False),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3),
                        max_leaves=6)


def value(t: pa.DataType) -> st.SearchStrategy:
    """A JSON value of type `t`, mostly (most runs are sound); sometimes null, or anything at all."""
    if pa.types.is_integer(t):  # and past the type's range, a bit
        signed, bits = pa.types.is_signed_integer(t), t.bit_width
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        fits = st.integers(low, high) | st.sampled_from([low, high, low - 1, high + 1])
    elif pa.types.is_floating(t):
        fits = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-2**70, 2**70) | st.sampled_from([0, -0.0])
    elif pa.types.is_boolean(t):
        fits = st.booleans()
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        fits = TEXT | st.just("")
    elif pa.types.is_null(t):
        fits = st.none()
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        fits = st.lists(value(t.value_type), max_size=3)
    elif pa.types.is_struct(t):
        fits = record([t.field(i) for i in range(t.num_fields)])
    else:
        fits = st.sampled_from(["2024-01-02", "2024-01-02 03:04:05", 1])
    return st.one_of(*[fits] * 12, st.none(), st.none(), anything)


def record(fields: list[pa.Field]) -> st.SearchStrategy[dict]:
    """An object of `fields`, each present or missing, and now and then a field of no column."""
    present = st.fixed_dictionaries({}, optional={f.name: value(f.type) for f in fields})
    extra = st.dictionaries(st.sampled_from(["zz", "extra"]), anything, max_size=1)
    return st.tuples(present, st.one_of(*[st.just({})] * 8, extra)).map(lambda p: {**p[0], **p[1]})


@st.composite
def cases(draw):
    schema = draw(schemas)
    records = draw(st.lists(record(list(schema)), max_size=6))
    lines = []
    for r in records:
        line = json.dumps(r, ensure_ascii=draw(st.booleans()))
        lines.append(re.sub(r"-0\.0(?![0-9eE])", "-0", line) if draw(st.booleans()) else line)  # an integer -0
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), "")  # a blank line
    columns = draw(st.none() | st.lists(st.sampled_from(schema.names), min_size=1, unique=True).map(tuple))
    return schema, columns, ("\n".join(lines) + draw(st.sampled_from(["", "\n"]))).encode()


def same(a, b) -> bool:
    """Equal, of one type at every depth, keys in one order, and floats of one sign."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_rows_are_the_parse_converted_or_none(case):
    schema, columns, data = case
    fmt = JsonFormat(schema, columns)
    rows = fmt.rows(data, first=True)
    try:
        table = fmt.parse(data, first=True)
    except (pa.ArrowException, ValueError):
        assert rows is None  # a run the parse refuses: parsed again, where the error is said
        return
    try:
        expected = table.to_pylist()
    except pa.ArrowException:  # pyarrow's own conversion fails (a list<null> its JSON reader made): nothing to match
        return
    assert rows is None or same(rows, expected)


def test_rows_are_decoded_directly_for_plain_types_and_fall_back_for_others():
    plain = pa.schema([("id", pa.int64()), ("x", pa.float64()),
                       ("m", pa.list_(pa.struct([("role", pa.string()), ("n", pa.null())])))])
    data = b'{"id": 1, "x": 2, "m": [{"role": "u"}, null]}\n\n{"m": []}\n'
    assert same(JsonFormat(plain).rows(data, first=True),
                [{"id": 1, "x": 2.0, "m": [{"role": "u", "n": None}, None]}, {"id": None, "x": None, "m": []}])
    assert JsonFormat(plain, ("m",)).rows(b'{"m": [{"q": 1}], "zz": 2}\n', first=True) == [
        {"m": [{"role": None, "n": None}]}]
    for bad in (b'{"id": 1, "zz": 2}\n', b'{"m": [{"q": 1}]}\n', b'{"id": 9223372036854775808}\n', b'{"id": 1.0}\n',
                b'{"id": 1\n', b'[1]\n', b'{"x": -0}\n'):
        assert JsonFormat(plain).rows(bad, first=True) is None, bad
    for other in (pa.float32(), pa.large_list(pa.int64()), pa.timestamp("s")):
        assert JsonFormat(pa.schema([("t", other)])).rows(b'{"t": null}\n', first=True) is None


# -- readers: rows as the tables give them, the same errors and skips ---------------------------------

@pytest.fixture
def small_spans(monkeypatch):
    """Spans of 2,000 bytes, their unshuffled Python rows made 500 bytes of records at a time."""
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 2000)
    monkeypatch.setattr(JsonFormat, "row_run_bytes", 500)


def _chat(n: int, start: int = 0) -> list[dict]:
    return [{"id": start + i, "messages": [{"role": "user", "content": "é" * (i % 7) + "x" * (i * 37 % 200)}]
             + ([{"role": "assistant", "content": ""}] if i % 3 else []), "source": None if i % 5 else "web"}
            for i in range(n)]


CHAT = pa.schema([("id", pa.int64()), ("messages", pa.list_(pa.struct([("role", pa.string()),
                                                                        ("content", pa.string())]))),
                  ("source", pa.string())])


def _write(volume, folder: str, records: list[dict], bad: dict[int, str] | None = None, name: str = "a.jsonl") -> None:
    lines = [json.dumps(r) for r in records]
    for k, line in (bad or {}).items():
        lines[k] = line
    text = ("\n".join(lines) + "\n").encode()
    volume.write(f"{folder}/{name}", gzip.compress(text) if name.endswith(".gz") else text)


def _by_piece(runs) -> list[tuple[int, list[dict]]]:
    """(piece index, its rows) from runs of (piece index, rows), each piece's runs joined."""
    out: list[tuple[int, list[dict]]] = []
    for k, rows in runs:
        if out and out[-1][0] == k:
            out[-1][1].extend(rows)
        else:
            out.append((k, list(rows)))
    return out


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("equalize", ["none", "pad"])
def test_read_rows_are_read_pieces_converted(volume, small_spans, shuffle, equalize):
    _write(volume, "d", _chat(300))
    reader = resolve_source(volume.path("d")).reader
    planning = Planning(3, shuffle, equalize=equalize)
    _, pieces = reader.share(0, 2, planning, epoch=1)
    options = dict(columns=None, fetch_threads=4, planning=planning, epoch=1)
    tables = [(k, t.to_pylist()) for k, t in reader.read_pieces(pieces, Cache(), **options)]
    assert _by_piece(reader.read_rows(pieces, Cache(), **options)) == _by_piece(tables) and len(tables) > 3


@pytest.mark.parametrize("shuffle", [False, True])
def test_unshuffled_rows_come_in_short_runs_and_shuffled_in_a_spans(volume, small_spans, shuffle):
    _write(volume, "d", _chat(300))
    reader = resolve_source(volume.path("d")).reader
    planning = Planning(3, shuffle)
    options = dict(columns=None, fetch_threads=4, planning=planning)
    spans = list(reader.read_pieces(reader.units(), Cache(), **options))
    runs = list(reader.read_rows(reader.units(), Cache(), **options))
    longest = max(len(json.dumps(r)) for _, rows in runs for r in rows)
    if shuffle:
        assert [(k, len(rows)) for k, rows in runs] == [(k, t.num_rows) for k, t in spans]
    else:  # each run about row_run_bytes (500) of records: whole records past the 500th byte
        assert len(runs) > 2 * len(spans)
        assert all(sum(len(json.dumps(r)) + 1 for r in rows) < 500 + longest + 1 for _, rows in runs)


@pytest.mark.parametrize("bad", ['{"id": 7, "messages": [}', '{"id": "seven"}', '{"id": 7, "extra": 1}',
                                 '{"id": 99999999999999999999}'])
@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz"])
def test_a_bad_record_raises_and_skips_as_the_tables_do(volume, small_spans, bad, name):
    _write(volume, "d", _chat(60), {7: bad}, name=name)
    reader = resolve_source(volume.path("d"), schema=CHAT).reader
    pieces = reader.units()
    options = dict(columns=None, fetch_threads=4)
    with pytest.raises(RecordError) as raised:
        list(reader.read_pieces(pieces, Cache(), **options))
    with pytest.raises(RecordError, match="^" + re.escape(str(raised.value)) + "$"):
        list(reader.read_rows(pieces, Cache(), **options))
    skips = {"tables": [], "rows": []}
    tables = [r for _, t in reader.read_pieces(pieces, Cache(), on_error="skip", skipped=skips["tables"], **options)
              for r in t.to_pylist()]
    rows = [r for _, got in reader.read_rows(pieces, Cache(), on_error="skip", skipped=skips["rows"], **options)
            for r in got]
    assert rows == tables and [r["id"] for r in rows] == [i for i in range(60) if i != 7]
    assert skips["rows"] == skips["tables"] == [f"{volume.path('d')}/{name}, line 8"]


def test_sound_runs_are_decoded_without_pyarrow_and_bad_ones_parsed(volume, small_spans, monkeypatch):
    # pyarrow.json.read_json is the parse: rows of sound runs never call it, a run with a bad record does.
    _write(volume, "good", _chat(200))
    _write(volume, "bad", _chat(200), {150: "not json"})
    streams = {f: RowStream(volume.path(f), on_error="skip") for f in ("good", "bad")}  # types inferred here
    tables = {f: [r for t in RowStream(volume.path(f), on_error="skip").tables() for r in t.to_pylist()]
              for f in streams}
    calls = []
    parse = pj.read_json
    monkeypatch.setattr(pj, "read_json", lambda *a, **k: calls.append(1) or parse(*a, **k))
    assert list(streams["good"]) == tables["good"] and calls == []
    assert list(streams["bad"]) == tables["bad"] and calls
    assert streams["bad"].skipped == [f"{volume.path('bad')}/a.jsonl, line 151"]


# -- the HF door: `for row in ds` as the Arrow tables converted ---------------------------------------

def _load(volume, folder: str, **options):
    return datasets.load_dataset("uc-volume", data_dir=volume.path(folder), streaming=True, split="train",
                                 num_workers=2, **options)


def _arrow_rows(ds) -> list[dict]:
    return [r for t in ds.with_format("arrow").iter(batch_size=1000) for r in t.to_pylist()]


@pytest.mark.parametrize("shuffle", [False, True])
def test_hf_rows_are_the_arrow_rows_and_resume_mid_shard(volume, small_spans, monkeypatch, shuffle):
    _write(volume, "d", _chat(300))
    _write(volume, "d", _chat(40, start=300), name="b.jsonl")
    ds = _load(volume, "d", shuffle=shuffle, seed=4)
    ds.set_epoch(1)
    arrow = _arrow_rows(ds)
    calls = []
    parse = pj.read_json
    monkeypatch.setattr(pj, "read_json", lambda *a, **k: calls.append(1) or parse(*a, **k))
    rows = list(ds)
    assert rows == arrow and sorted(r["id"] for r in rows) == list(range(340)) and calls == []
    it = iter(ds)
    head = [next(it) for _ in range(123)]  # inside the first shard's second span
    state = ds.state_dict()
    resumed = _load(volume, "d", shuffle=shuffle, seed=4)
    resumed.set_epoch(1)
    resumed.load_state_dict(state)
    assert head + list(resumed) == rows


def test_hf_rows_of_bad_records_and_of_columns(volume, small_spans, caplog, monkeypatch):
    monkeypatch.setattr(lines, "SAMPLE_BYTES", 2000)  # types inferred without features: before record 60
    _write(volume, "d", _chat(100), {5: "not json", 60: '{"id": "x"}'})
    ds = _load(volume, "d", on_error="skip", features=datasets.Features.from_arrow_schema(CHAT))
    with caplog.at_level(logging.WARNING, logger="air_core"):
        rows = list(ds)
    said = [m for m in caplog.messages if "skipping a malformed record" in m]
    assert len(said) == 2 and "a.jsonl, line 6 " in said[0] and "a.jsonl, line 61 " in said[1]
    assert rows == _arrow_rows(ds) and sorted(r["id"] for r in rows) == [i for i in range(100) if i not in (5, 60)]
    picked = _load(volume, "d", on_error="skip", columns=["source", "id"])
    rows = list(picked)
    assert rows == _arrow_rows(picked) and list(rows[0]) == ["source", "id"] and len(rows) == 98
