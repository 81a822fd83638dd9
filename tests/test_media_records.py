"""Records that name media files: rows with each medium's cached copy, through every door."""

from __future__ import annotations

import io
import json
import logging
import os

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
from PIL import Image

import air_hf  # noqa: F401 - registers uc-volume
from air_core import RowStream, resolve_source, run_state
from air_core.errors import EmptyVolumeError, MediaError, OptionError, RecordError
from air_core.torch import UCVolumeDataset


def png(i: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4 + i, 3), (i % 256, 0, 0)).save(out, "PNG")
    return out.getvalue()


def jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def image_folder(volume, n: int = 6, *, unnamed: int = 2) -> dict[str, bytes]:
    """HF's layout: train/ and test/ folders of PNGs beside a metadata.jsonl naming all but `unnamed` of them."""
    contents = {}
    for split, count in (("train", n), ("test", 2)):
        records = []
        for i in range(count + unnamed):
            rel = f"imgs/{split}/{i}.png"
            contents[rel] = png(i + (100 if split == "test" else 0))
            volume.write(rel, contents[rel])
            if i < count:
                records.append({"file_name": f"{i}.png", "caption": f"{split} {i}"})
        volume.write(f"imgs/{split}/metadata.jsonl", jsonl(records))
    return contents


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# -- HF's folder convention ---------------------------------------------------------------------------


def test_folder_convention_reads_the_metadata_rows_with_cached_media(volume):
    contents = image_folder(volume)
    rows = list(RowStream(volume.path("imgs"), include="train/*"))
    assert [r["caption"] for r in rows] == [f"train {i}" for i in range(6)]
    assert list(rows[0]) == ["image", "caption"]  # `file_name` is named for the files' kind, as HF names it
    cache = os.environ["AIR_CACHE_DIR"]
    for i, row in enumerate(rows):
        assert row["image"].startswith(cache)  # the copy in the node cache, not the volume's file
        assert read(row["image"]) == contents[f"imgs/train/{i}.png"]


def test_media_no_record_names_are_not_read(volume):
    image_folder(volume, unnamed=3)
    stream = RowStream(volume.path("imgs"), include="train/*")
    list(stream)
    # six media and the records file's span: the three unnamed images were never fetched
    names = {e for _, _, files in os.walk(os.environ["AIR_CACHE_DIR"] + "/objects") for e in files}
    assert len(names) == 7


def test_folder_convention_columns_are_named_as_hf_names_them(volume):
    for i in range(3):
        volume.write(f"ds/{i}.png", png(i))
    volume.write("ds/metadata.jsonl", jsonl([{"file_name": "0.png", "file_names": ["1.png", "2.png"],
                                              "mask_file_name": "2.png", "label": 1}]))
    source = resolve_source(volume.path("ds"))
    assert source.reader.schema().names == ["image", "images", "mask", "label"]
    assert source.reader.media() == {"image": "image", "images": "image", "mask": "image"}
    [row] = RowStream(volume.path("ds"))
    assert [read(p) for p in row["images"]] == [png(1), png(2)]
    assert read(row["mask"]) == png(2)


@pytest.mark.parametrize("kind,ext", [("audio", "wav"), ("video", "mp4")])
def test_the_bare_file_name_is_named_for_the_files_kind(volume, kind, ext):
    volume.write(f"ds/a.{ext}", b"x")
    volume.write("ds/metadata.jsonl", jsonl([{"file_name": f"a.{ext}"}]))
    assert resolve_source(volume.path("ds")).reader.media() == {kind: kind}


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_folder_convention_of_csv_and_parquet_metadata(volume, kind):
    for i in range(3):
        volume.write(f"ds/{i}.png", png(i))
    table = pa.table({"file_name": [f"{i}.png" for i in range(3)], "n": [0, 1, 2]})
    if kind == "csv":
        volume.write("ds/metadata.csv", "file_name,n\n" + "".join(f"{i}.png,{i}\n" for i in range(3)))
    else:
        pq.write_table(table, volume.local("ds/metadata.parquet"))
    rows = list(RowStream(volume.path("ds")))
    assert [r["n"] for r in rows] == [0, 1, 2]
    assert [read(r["image"]) for r in rows] == [png(i) for i in range(3)]


def test_metadata_files_of_two_kinds_are_refused(volume):
    volume.write("ds/a/metadata.jsonl", jsonl([{"file_name": "x.png"}]))
    volume.write("ds/b/metadata.csv", "file_name\nx.png\n")
    volume.write("ds/b/x.png", png(0))
    with pytest.raises(OptionError, match=r"metadata files of 2 kinds \(metadata.jsonl, metadata.csv\)"):
        resolve_source(volume.path("ds"))


def test_metadata_without_a_file_name_column_is_refused(volume):
    volume.write("ds/metadata.jsonl", jsonl([{"text": "a"}]))
    volume.write("ds/x.png", png(0))
    with pytest.raises(OptionError, match=r"columns \['text'\] name no file: give one `file_name`"):
        resolve_source(volume.path("ds"))


def test_a_folder_of_records_alone_stays_a_table(volume):
    volume.write("ds/metadata.jsonl", jsonl([{"a": 1}]))
    volume.write("ds/more.jsonl", jsonl([{"a": 2}]))
    assert sorted(r["a"] for r in RowStream(volume.path("ds"))) == [1, 2]


# -- media= and media_dir= ----------------------------------------------------------------------------


def llava_records(volume, n: int) -> list[dict]:
    """LLaVA's conversations, record i naming image i (written) under `llava/images/`."""
    records = []
    for i in range(n):
        volume.write(f"llava/images/part{i % 2}/{i}.png", png(i))
        records.append({"id": str(i), "image": f"part{i % 2}/{i}.png",
                        "conversations": [{"from": "human", "value": "<image>\nWhat is it?"},
                                          {"from": "gpt", "value": f"picture {i}"}]})
    return records


def llava(volume, n: int = 5) -> list[dict]:
    """LLaVA's layout: a JSON Lines file of conversations naming images under a sibling `images/` folder."""
    records = llava_records(volume, n)
    volume.write("llava/chat/llava.jsonl", jsonl(records))
    return records


def test_media_dir_relative_to_the_folder(volume):
    records = llava(volume)
    rows = list(RowStream(volume.path("llava"), media={"image": "image"}, media_dir="images"))
    assert [r["id"] for r in rows] == [r["id"] for r in records]
    assert [read(r["image"]) for r in rows] == [png(i) for i in range(5)]
    assert rows[0]["conversations"] == records[0]["conversations"]


def test_media_dir_as_a_volume_path_and_dotdot_inside_the_volume(volume):
    llava(volume)
    rows = list(RowStream(volume.path("llava/chat"), media={"image": "image"}, media_dir=volume.path("llava/images")))
    assert read(rows[1]["image"]) == png(1)
    # `..` that stays inside the volume is a path like any other (a LLaVA set's sibling images/ folder)
    volume.write("sib/recs/r.jsonl", jsonl([{"image": "../images/0.png"}]))
    volume.write("sib/images/0.png", png(7))
    [row] = RowStream(volume.path("sib/recs"), media={"image": "image"})
    assert read(row["image"]) == png(7)


def test_a_list_of_paths(volume):
    for i in range(3):
        volume.write(f"d/{i}.png", png(i))
    volume.write("d/r.jsonl", jsonl([{"images": ["0.png", "2.png"]}, {"images": []}, {"images": None}]))
    rows = list(RowStream(volume.path("d"), media={"images": "image"}))
    assert [read(p) for p in rows[0]["images"]] == [png(0), png(2)]
    assert rows[1]["images"] == [] and rows[2]["images"] is None


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_csv_and_parquet_records(volume, fmt):
    for i in range(4):
        volume.write(f"d/media/{i}.png", png(i))
    if fmt == "csv":
        volume.write("d/r.csv", "path,n\n" + "".join(f"{i}.png,{i}\n" for i in range(4)))
    else:
        pq.write_table(pa.table({"path": [f"{i}.png" for i in range(4)], "n": list(range(4))}), volume.local("d/r.parquet"))
    rows = list(RowStream(volume.path("d"), media={"path": "file"}, media_dir="media"))
    assert [read(r["path"]) for r in rows] == [png(i) for i in range(4)]


def test_media_option_errors(volume):
    llava(volume)
    with pytest.raises(OptionError, match=r"media= names column 'img', which the records do not have: their "
                                          r"columns are \['id', 'image', 'conversations'\]"):
        resolve_source(volume.path("llava"), media={"img": "image"})
    with pytest.raises(OptionError, match=r"a column's kind is one of"):
        resolve_source(volume.path("llava"), media={"image": "picture"})
    with pytest.raises(OptionError, match=r"column 'id' names media files, but holds"):
        volume.write("n/r.jsonl", jsonl([{"id": 1}]))
        resolve_source(volume.path("n"), media={"id": "image"})
    with pytest.raises(OptionError, match="outside the volume"):
        resolve_source(volume.path("llava"), media={"image": "image"}, media_dir="../../../other")
    with pytest.raises(OptionError, match="give media= too"):
        resolve_source(volume.path("llava"), media_dir="images")
    with pytest.raises(EmptyVolumeError, match="holds no CSV files of records"):
        resolve_source(volume.path("llava"), mode="csv", media={"image": "image"})


# -- bad media ------------------------------------------------------------------------------------------


def broken(volume) -> str:
    for i in (0, 2, 3):
        volume.write(f"b/{i}.png", png(i))
    volume.write("b/r.jsonl", "\n" + jsonl([{"image": f"{i}.png", "i": i} for i in range(4)]))
    return volume.path("b")


def test_a_missing_medium_names_the_records_file_line_and_path(volume):
    path = broken(volume)
    with pytest.raises(MediaError, match=rf"{path}/r.jsonl, line 3: the record names '1.png': {path}/1.png, "
                                          r"which is not on the volume; .*on_error='skip'"):
        list(RowStream(path, media={"image": "image"}))


def test_a_missing_medium_is_skipped_with_a_warning_and_counted(volume, caplog):
    path = broken(volume)
    stream = RowStream(path, media={"image": "image"}, on_error="skip")
    with caplog.at_level(logging.WARNING, logger="air_core"):
        rows = list(stream)
    assert [r["i"] for r in rows] == [0, 2, 3]
    assert stream.skipped == [f"{path}/r.jsonl, line 3"]
    assert stream.state_dict()["skipped"] == [f"{path}/r.jsonl, line 3"]
    assert "skipping a record" in caplog.text and "1.png" in caplog.text


def test_an_image_that_does_not_open_names_its_record(volume):
    path = broken(volume)
    volume.write("b/1.png", b"<html>not found</html>")
    with pytest.raises(MediaError, match=rf"r.jsonl, line 3: the record names '1.png': {path}/1.png, which does "
                                         r"not open as an image \(UnidentifiedImageError"):
        list(RowStream(path, media={"image": "image"}))
    stream = RowStream(path, media={"image": "image"}, on_error="skip")
    assert [r["i"] for r in stream] == [0, 2, 3] and stream.skipped == [f"{path}/r.jsonl, line 3"]
    assert [r["i"] for r in RowStream(path, media={"image": "file"})] == [0, 1, 2, 3]  # a file is not opened


def test_a_missing_medium_in_parquet_names_its_row(volume):
    volume.write("p/0.png", png(0))
    pq.write_table(pa.table({"image": ["0.png", "gone.png"]}), volume.local("p/r.parquet"))
    with pytest.raises(MediaError, match=r"r.parquet, row 1: the record names 'gone.png'"):
        list(RowStream(volume.path("p"), media={"image": "image"}))


@pytest.mark.parametrize("named,why", [
    ("../../../../x.png", "outside the volume /Volumes/main/ml/raw"),
    ("/etc/passwd", "an absolute path"),
    ("https://example.com/x.png", "a URL"),
    ("s3://bucket/x.png", "a URL"),
])
def test_a_path_that_leaves_the_volume_is_refused_before_any_read(volume, named, why):
    volume.write("x/r.jsonl", jsonl([{"image": named}]))
    stream = RowStream(volume.path("x"), media={"image": "image"})
    with pytest.raises(RecordError, match=rf"x/r.jsonl, line 1: the record names '{named}': {why}"):
        list(stream)
    assert stream.cache.stats.misses == 0  # nothing fetched: the records were cached when their types were inferred


# -- the stream ----------------------------------------------------------------------------------------


def many(volume, n: int = 40) -> None:
    for i in range(n):
        volume.write(f"m/img/{i}.png", png(i))
    volume.write("m/a.jsonl", jsonl([{"image": f"img/{i}.png", "i": i} for i in range(0, n, 2)]))
    volume.write("m/b.jsonl", jsonl([{"image": f"img/{i}.png", "i": i} for i in range(1, n, 2)]))


def test_ranks_and_workers_read_every_record_once(volume):
    many(volume)
    seen = []
    for rank in range(2):
        for worker in range(2):
            for row in RowStream(volume.path("m"), media={"image": "image"}, rank=rank, world_size=2, worker=worker,
                                 num_workers=2):
                assert read(row["image"]) == png(row["i"])
                seen.append(row["i"])
    assert sorted(seen) == list(range(40))


def test_one_small_records_file_is_shared_by_every_rank_and_worker(volume):
    for i in range(40):
        volume.write(f"one/{i}.png", png(i))
    volume.write("one/metadata.jsonl", jsonl([{"file_name": f"{i}.png", "i": i} for i in range(40)]))
    counts, seen = [], []
    for rank in range(4):
        for worker in range(3):
            got = [r["i"] for r in RowStream(volume.path("one"), rank=rank, world_size=4, worker=worker,
                                             num_workers=3)]
            counts.append(len(got))
            seen += got
    assert sorted(seen) == list(range(40))
    assert min(counts) >= 3 and max(counts) <= 4  # by records, not one stream holding the file's one span
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("one"), streaming=True, split="train", world_size=4,
                               num_workers=3)
    assert ds.num_shards == 12
    assert sorted(r["i"] for r in ds) == list(range(40))


def test_equal_counts_across_ranks(volume):
    many(volume, 41)
    counts = [len(list(RowStream(volume.path("m"), media={"image": "image"}, rank=rank, world_size=3,
                                 equalize="drop"))) for rank in range(3)]
    assert counts == [13, 13, 13]


def test_resume_mid_stream_gives_the_rest(volume):
    many(volume)
    options = dict(media={"image": "image"}, shuffle=True, seed=3)
    whole = [r["i"] for r in RowStream(volume.path("m"), **options)]
    stream = RowStream(volume.path("m"), **options)
    it = iter(stream)
    first = [next(it)["i"] for _ in range(7)]
    state = stream.state_dict()
    again = RowStream(volume.path("m"), **options)
    again.load_state_dict(state)
    assert first + [r["i"] for r in again] == whole


def test_a_run_state_resumes_on_another_grid_each_record_once(volume):
    many(volume)
    options = dict(media={"image": "image"}, shuffle=True, seed=5)
    old = [RowStream(volume.path("m"), rank=r, world_size=2, worker=w, num_workers=2, **options)
           for r in range(2) for w in range(2)]
    delivered = []
    for k, stream in enumerate(old):
        it = iter(stream)
        delivered += [next(it)["i"] for _ in range(2 + k)]
    state = run_state([s.state_dict() for s in old])
    rest = []
    for rank in range(3):
        stream = RowStream(volume.path("m"), rank=rank, world_size=3, **options)
        stream.load_state_dict(state)
        for row in stream:
            assert read(row["image"]) == png(row["i"])
            rest.append(row["i"])
    assert sorted(delivered + rest) == list(range(40))


def test_a_skipped_record_is_not_read_again_after_a_resume(volume):
    path = broken(volume)
    stream = RowStream(path, media={"image": "image"}, on_error="skip")
    it = iter(stream)
    assert [next(it)["i"] for _ in range(2)] == [0, 2]
    again = RowStream(path, media={"image": "image"}, on_error="skip")
    again.load_state_dict(stream.state_dict())
    assert [r["i"] for r in again] == [3]
    assert again.skipped == [f"{path}/r.jsonl, line 3"]


@pytest.fixture
def volume_calls(volume, monkeypatch):
    """Calls `calls()` the files under the volume: each `os.stat` and `os.open` of one (its local path) from then on."""
    root, seen = str(volume.local("")), []
    stat, open_ = os.stat, os.open

    def calls():
        def counted_stat(path, *args, **kwargs):
            if isinstance(path, str) and path.startswith(root):
                seen.append(path)
            return stat(path, *args, **kwargs)

        def counted_open(path, *args, **kwargs):
            if isinstance(path, str) and path.startswith(root):
                seen.append(path)
            return open_(path, *args, **kwargs)

        monkeypatch.setattr(os, "stat", counted_stat)
        monkeypatch.setattr(os, "open", counted_open)
        return seen

    return calls


def test_a_second_epoch_asks_the_volume_nothing(volume, volume_calls):
    many(volume)
    stream = RowStream(volume.path("m"), media={"image": "image"}, shuffle=True)
    first = sorted(read(r["image"]) for r in stream)
    calls = volume_calls()
    assert sorted(read(r["image"]) for r in stream) == first
    assert calls == []  # no stat of a medium to learn its version: the job kept it


def test_a_second_epoch_over_the_files_api_sends_no_request(files_api):
    many(files_api, 10)
    stream = RowStream(files_api.path("m"), media={"image": "image"})
    first = [read(r["image"]) for r in stream]
    files_api.server.clear_trace()
    assert [read(r["image"]) for r in stream] == first
    assert files_api.server.trace == []  # no HEAD of a medium for its version: the job kept it


def test_a_medium_changed_is_read_afresh_by_the_next_job(volume):
    many(volume, 4)
    options = dict(media={"image": "image"})
    stream = RowStream(volume.path("m"), **options)
    assert read(next(iter(stream))["image"]) == png(0)
    volume.write("m/img/0.png", png(99))
    assert read(next(iter(stream))["image"]) == png(0)  # within a job, each medium as the job first read it
    assert read(next(iter(RowStream(volume.path("m"), **options)))["image"]) == png(99)
    stream.cache.clear()
    assert read(next(iter(stream))["image"]) == png(99)  # a copy fetched again is of the medium as it is now


def test_columns_chosen_by_their_row_names(volume):
    image_folder(volume)
    rows = list(RowStream(volume.path("imgs"), include="test/*", columns=["image"]))
    assert [read(r["image"]) for r in rows] == [png(100), png(101)] and list(rows[0]) == ["image"]
    assert [r["caption"] for r in RowStream(volume.path("imgs"), include="test/*", columns=["caption"])] == \
        ["test 0", "test 1"]
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("imgs"), columns=["image"], streaming=True,
                               split="test")
    assert [r["image"].size for r in ds] == [(104, 3), (105, 3)]


def test_torch_rows(volume):
    llava(volume)
    rows = list(UCVolumeDataset(volume.path("llava"), mode="rows", media={"image": "image"}, media_dir="images"))
    assert [read(r["image"]) for r in rows] == [png(i) for i in range(5)]
    with pytest.raises(OptionError, match="give mode='rows'"):
        UCVolumeDataset(volume.path("llava"), media={"image": "image"})


@pytest.mark.slow
def test_dataloader_workers_read_every_record_once(volume):
    import torch.utils.data

    many(volume)
    dataset = UCVolumeDataset(volume.path("m"), mode="rows", media={"image": "image"})
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    rows = list(loader)
    assert sorted(r["i"] for r in rows) == list(range(40))
    assert all(read(r["image"]) == png(r["i"]) for r in rows)


# -- HF --------------------------------------------------------------------------------------------------


def test_hf_image_features_from_the_cached_copy(volume):
    image_folder(volume)
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("imgs"), streaming=True)
    assert list(ds) == ["train", "test"]
    assert ds["train"].features == datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")})
    rows = list(ds["train"])
    assert [r["caption"] for r in rows] == [f"train {i}" for i in range(6)]
    assert [r["image"].size for r in rows] == [(4 + i, 3) for i in range(6)]
    raw = next(iter(ds["test"].decode(False)))
    assert raw["image"]["bytes"] is None and read(raw["image"]["path"]) == png(100)


def test_hf_a_list_of_images_and_media_dir(volume):
    for i in range(3):
        volume.write(f"s/images/{i}.png", png(i))
    volume.write("s/chat.jsonl", jsonl([{"messages": [{"role": "user", "content": "hi"}], "images": ["0.png", "1.png"]},
                                        {"messages": [{"role": "user", "content": "yo"}], "images": ["2.png"]}]))
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("s"), media={"images": "image"},
                               media_dir="images", streaming=True, split="train")
    assert ds.features["images"] == datasets.List(datasets.Image())
    rows = list(ds)
    assert [[im.size for im in r["images"]] for r in rows] == [[(4, 3), (5, 3)], [(6, 3)]]
    assert rows[0]["messages"] == [{"role": "user", "content": "hi"}]


def test_hf_features_given_with_media_columns(volume):
    image_folder(volume)
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")})
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("imgs"), features=features, streaming=True,
                               split="train")
    assert [(r["image"].size, r["caption"]) for r in ds] == [((4 + i, 3), f"train {i}") for i in range(6)]
    paths = datasets.Features({"image": datasets.Value("string"), "caption": datasets.Value("string")})
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("imgs"), features=paths, streaming=True,
                               split="test")
    assert [read(r["image"]) for r in ds] == [png(100), png(101)]  # given as a string: the copy's path
    for i in range(3):
        volume.write(f"s/images/{i}.png", png(i))
    volume.write("s/chat.jsonl", jsonl([{"messages": [{"role": "user", "content": "hi"}], "images": ["0.png", "1.png"],
                                         "n": 1}]))
    chat = datasets.Features({"messages": datasets.List({"role": datasets.Value("string"),
                                                         "content": datasets.Value("string")}),
                              "images": datasets.List(datasets.Image()), "n": datasets.Value("float64")})
    [row] = datasets.load_dataset("uc-volume", data_dir=volume.path("s"), media={"images": "image"},
                                  media_dir="images", features=chat, streaming=True, split="train")
    assert [im.size for im in row["images"]] == [(4, 3), (5, 3)] and row["n"] == 1.0
    with pytest.raises(OptionError, match=r"features= \(schema=\) lacks the media column 'image'"):
        resolve_source(volume.path("imgs"), schema=pa.schema([("caption", pa.string())]))


def test_hf_non_streaming_rows_carry_the_bytes(volume):
    image_folder(volume)
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("imgs"), split="test")
    raw = ds.cast_column("image", datasets.Image(decode=False))[0]["image"]
    assert raw["bytes"] == png(100)


def test_hf_file_media_are_paths(volume):
    llava(volume)
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("llava"), media={"image": "file"},
                               media_dir="images", streaming=True, split="train")
    assert ds.features["image"] == datasets.Value("string")
    assert [read(r["image"]) for r in ds] == [png(i) for i in range(5)]


# -- Ray ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ray_rows_with_local_paths(volume, ray_cluster):
    from air_ray import read_uc_volume

    llava(volume)
    ds = read_uc_volume(volume.path("llava"), media={"image": "image"}, media_dir="images")
    rows = sorted(ds.take_all(), key=lambda r: r["id"])
    assert [read(r["image"]) for r in rows] == [png(i) for i in range(5)]
    assert ds.select_columns(["id", "image"]).take(1)[0].keys() == {"id", "image"}


@pytest.mark.slow
def test_ray_media_as_bytes(volume, ray_cluster):
    from air_ray import UCVolumeDatasource, read_uc_volume

    llava(volume)
    ds = read_uc_volume(volume.path("llava"), media={"image": "image"}, media_dir="images", include_bytes=True)
    assert ds.schema().base_schema.field("image").type == pa.binary()
    assert [r["image"] for r in sorted(ds.take_all(), key=lambda r: r["id"])] == [png(i) for i in range(5)]
    for i in range(3):
        volume.write(f"d/{i}.png", png(i))
    volume.write("d/r.jsonl", jsonl([{"images": ["0.png", "2.png"], "k": 0}, {"images": None, "k": 1},
                                     {"images": ["1.png"], "k": 2}]))
    source = UCVolumeDatasource(volume.path("d"), media={"images": "image"}, include_bytes=True)
    rows = sorted(ray.data.read_datasource(source).take_all(), key=lambda r: r["k"])
    assert [r["images"] for r in rows] == [[png(0), png(2)], None, [png(1)]]
