"""`.json` files of records: the objects of a top-level array (LLaVA's layout) or objects one after another, read
by an index of where each lies, shared by every rank and worker by ranges."""

from __future__ import annotations

import json
import os

import datasets
import pytest

import air_hf  # noqa: F401 - registers uc-volume
from air_core import RowStream, resolve_source
from air_core.errors import OptionError, RecordError
from air_core.read import line_spans
from test_media_records import llava_records, png


def records(n: int) -> list[dict]:
    return [{"id": i, "text": "quote \" back \\ brace { bracket [" * (i % 3), "turns": [{"from": "human", "value": f"q{i}"}]}
            for i in range(n)]


@pytest.fixture
def small_spans(monkeypatch):
    """Spans of 512 bytes: a file of a few KB is cut into many, and objects run across them."""
    monkeypatch.setattr(line_spans, "SPAN_BYTES", 512)


@pytest.mark.parametrize("indent", [None, 2])
def test_an_array_of_objects_is_read_as_its_rows(volume, small_spans, indent):
    data = records(40)
    volume.write("a/data.json", json.dumps(data, indent=indent))
    rows = list(RowStream(volume.path("a"), mode="json"))
    assert rows == data


def test_every_rank_and_worker_reads_each_object_once(volume, small_spans):
    data = records(60)
    volume.write("a/data.json", json.dumps(data, indent=1))
    seen = []
    for rank in range(3):
        for worker in range(2):
            got = [r["id"] for r in RowStream(volume.path("a"), mode="json", rank=rank, world_size=3, worker=worker,
                                              num_workers=2)]
            assert got  # the one file is shared by ranges, not read by one stream
            seen += got
    assert sorted(seen) == list(range(60))
    counts = [len(list(RowStream(volume.path("a"), mode="json", rank=r, world_size=4, equalize="drop")))
              for r in range(4)]
    assert counts == [15] * 4


def test_objects_one_after_another_and_json_lines_in_a_json_file(volume, small_spans):
    data = records(10)
    volume.write("b/pretty.json", "".join(json.dumps(r, indent=2) + "\n" for r in data))
    volume.write("c/lines.json", "".join(json.dumps(r) + "\n" for r in data))
    assert list(RowStream(volume.path("b"), mode="json")) == data
    assert list(RowStream(volume.path("c"), mode="json")) == data


def test_the_index_is_made_once_a_node_and_kept_like_a_listing(volume, small_spans):
    volume.write("a/data.json", json.dumps(records(30)))
    list(RowStream(volume.path("a"), mode="json"))
    folder = os.path.join(os.environ["AIR_CACHE_DIR"], "manifests", "objects")
    [index] = [f for f in os.listdir(folder) if f.endswith(".objects")]
    made = os.stat(os.path.join(folder, index)).st_mtime_ns
    assert len(list(RowStream(volume.path("a"), mode="json", shuffle=True, seed=1))) == 30
    assert os.stat(os.path.join(folder, index)).st_mtime_ns == made


def test_a_malformed_object_is_named_by_its_place(volume, small_spans):
    text = json.dumps(records(12), indent=2)
    bad = text.replace('"id": 7,', '"id": 7x,')
    volume.write("a/data.json", bad)
    with pytest.raises(RecordError, match=r"data.json, object 8 \(byte offset \d+\): not a valid JSON object"):
        list(RowStream(volume.path("a"), mode="json"))
    rows = list(RowStream(volume.path("a"), mode="json", on_error="skip"))
    assert [r["id"] for r in rows] == [i for i in range(12) if i != 7]


@pytest.mark.parametrize("text,why", [("[1, 2, 3]", "holds no JSON object"), ('[{"a": 1}, "b"]', "other than objects"),
                                      ('[{"a": 1}, {"a": ', "ends inside a JSON value")])
def test_a_json_file_that_holds_no_records_says_so(volume, text, why):
    volume.write("a/data.json", text)
    with pytest.raises(RecordError, match=why):
        list(RowStream(volume.path("a"), mode="json"))


# -- LLaVA: one .json array naming images under a sibling folder ---------------------------------------


def llava(volume, n: int = 6) -> list[dict]:
    """LLaVA's layout: one JSON array of conversations naming images under a sibling `images/` folder."""
    data = llava_records(volume, n)
    volume.write("llava/llava_mix.json", json.dumps(data, indent=2))
    return data


def test_llava_json_with_media_under_auto(volume, small_spans):
    data = llava(volume)
    rows = list(RowStream(volume.path("llava"), media={"image": "image"}, media_dir="images"))
    assert [r["id"] for r in rows] == [d["id"] for d in data]
    for i, r in enumerate(rows):
        with open(r["image"], "rb") as f:
            assert f.read() == png(i)
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("llava"), media={"image": "image"},
                               media_dir="images", streaming=True, split="train")
    assert [r["image"].size for r in ds] == [(4 + i, 3) for i in range(6)]


def test_json_lines_beside_a_json_file_of_records_is_refused_under_auto(volume):
    llava(volume)
    volume.write("llava/more.jsonl", '{"id": "x", "image": "part0/0.png"}\n')
    with pytest.raises(OptionError, match="holds JSON Lines and JSON files: .*include="):
        resolve_source(volume.path("llava"), media={"image": "image"}, media_dir="images")
    source = resolve_source(volume.path("llava"), media={"image": "image"}, media_dir="images", include="*.json")
    assert list(source.manifest.paths) == ["llava_mix.json"]
