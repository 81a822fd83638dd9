"""Packs of records that name media: each record packed with its media, read through every door as the folder's
rows, the media fetched with their records' row groups."""

from __future__ import annotations

import logging
import os

import datasets
import pyarrow.parquet as pq
import pytest

import air_hf  # noqa: F401 - registers uc-volume
from air_core import FileStream, RowStream, pack, resolve_source
from air_core.cli import main
from air_core.errors import MediaError, OptionError
from air_core.packs.records import cut
from air_core.packs.store import load_generation, pack_folder
from air_core.torch import UCVolumeDataset
from test_media_records import broken, image_folder, jsonl, llava_records, many, png, read, volume_calls  # noqa: F401

LLAVA = dict(media={"image": "image"}, media_dir="images")


def same_rows(loose: list[dict], packed: list[dict]) -> bool:
    """The pack's rows are the folder's, each medium's bytes where the folder's row has its cached copy's path
    (or a list of them)."""
    def contents(value):
        return [read(p) for p in value] if isinstance(value, list) else read(value) if isinstance(value, str) else value

    media = [k for k, v in packed[0].items() if isinstance(v, bytes) or (isinstance(v, list) and v and
                                                                      isinstance(v[0], bytes))]
    return [{k: contents(v) if k in media else v for k, v in row.items()} for row in loose] == packed


def llava(volume, n: int = 5) -> list[dict]:
    records = llava_records(volume, n)
    volume.write("llava/chat/llava.jsonl", jsonl(records))
    return records


# -- packing -------------------------------------------------------------------------------------------------


def test_cuts_keep_order_and_never_cross_a_records_file():
    files = [0] * 5 + [1] * 3 + [2] * 4
    shards = cut(files, [10] * 12, 60, 20)
    groups = [g for s in shards for g in s]
    assert [a for a, _ in groups] == sorted(a for a, _ in groups) and groups[0][0] == 0 and groups[-1][1] == 12
    assert all(b == a2 for (_, b), (a2, _) in zip(groups, groups[1:]))
    assert all(len({files[i] for i in range(a, b)}) == 1 for a, b in groups)
    assert len(shards) == 2


def test_an_hf_folder_is_packed_as_its_records_with_their_media(volume):
    image_folder(volume)
    r = pack(volume.path("imgs"), volume.path("packed"), row_group_size=300)
    assert r.records and r.files == 8 and not r.skipped and r.left_out == ()
    generation = load_generation(pack_folder(volume.path("packed")))
    assert generation.media == (("image", "image"),)
    shards = pq.read_table(volume.local(r.path[len(volume.vol) + 1:]))  # any Parquet reader reads the records
    assert shards.column_names == ["image", "caption"]
    first = shards.to_pylist()[0]
    assert first["image"] == {"bytes": png(100), "path": "0.png"} and first["caption"] == "test 0"
    assert pq.ParquetFile(volume.local(f"{r.path[len(volume.vol) + 1:]}/{r.shards[0]}")).num_row_groups > 2
    again = pack(volume.path("imgs"), volume.path("packed"), row_group_size=300)
    assert again.skipped and again.path == r.path and again.files == 8
    volume.write("imgs/test/1.png", png(7))  # a medium changed: a new generation
    assert pack(volume.path("imgs"), volume.path("packed"), row_group_size=300).path != r.path


def test_a_killed_pack_run_again_keeps_the_shards_it_finished(volume):
    many(volume)
    options = dict(media={"image": "image"}, shard_size=1500, row_group_size=500)
    r = pack(volume.path("m"), volume.path("packed"), **options)
    assert len(r.shards) > 2
    folder = volume.local(r.path[len(volume.vol) + 1:])
    for name in (".pack.json", r.shards[1]):  # killed before its marker, one shard still to copy
        (folder / name).unlink()
    (volume.local("packed") / "_air_pack.json").unlink()
    again = pack(volume.path("m"), volume.path("packed"), **options)
    assert (again.path, again.written, again.files) == (r.path, 1, 40)
    assert sorted((row["i"], row["image"]) for row in RowStream(volume.path("packed"))) == \
        [(i, png(i)) for i in range(40)]


def test_a_folder_of_files_without_records_still_packs_as_files(volume):
    for i in range(3):
        volume.write(f"plain/{i}.png", png(i))
    r = pack(volume.path("plain"), volume.path("packed"))
    assert not r.records and r.files == 3
    assert [f.path for f in FileStream(volume.path("packed"))] == [volume.path(f"plain/{i}.png") for i in range(3)]
    with pytest.raises(OptionError, match="holds no records that name media"):
        pack(volume.path("plain"), volume.path("other"), on_error="skip")


def test_a_medium_named_by_several_records_is_in_each_of_their_rows(volume):
    volume.write("s/img/a.png", png(1))
    volume.write("s/recs/r.jsonl", jsonl([{"image": "a.png", "k": 0}, {"image": "a.png", "k": 1},
                                          {"image": None, "k": 2}]))
    pack(volume.path("s/recs"), volume.path("packed"), media={"image": "image"}, media_dir=volume.path("s/img"))
    rows = list(RowStream(volume.path("packed")))
    assert [(r["image"], r["k"]) for r in rows] == [(png(1), 0), (png(1), 1), (None, 2)]


def test_a_missing_medium_fails_the_pack_naming_the_records_file_line_and_path(volume):
    path = broken(volume)
    with pytest.raises(MediaError, match=rf"{path}/r.jsonl, line 3: the record names '1.png': {path}/1.png, "
                                         r"which is not on the volume; .*on_error='skip'"):
        pack(path, volume.path("packed"), media={"image": "image"})
    assert not volume.local("packed/_air_pack.json").exists()  # nothing published


def test_a_missing_medium_is_left_out_with_on_error_skip(volume, caplog):
    path = broken(volume)
    with caplog.at_level(logging.WARNING, logger="air_core"):
        r = pack(path, volume.path("packed"), media={"image": "image"}, on_error="skip")
    assert r.left_out == (f"{path}/r.jsonl, line 3",) and r.files == 3
    assert "skipping a record" in caplog.text
    assert [(row["i"], row["image"]) for row in RowStream(volume.path("packed"))] == [(i, png(i)) for i in (0, 2, 3)]


def test_an_image_that_does_not_open_fails_the_pack_or_is_left_out(volume):
    path = broken(volume)
    volume.write("b/1.png", b"<html>not found</html>")
    with pytest.raises(MediaError, match=r"r.jsonl, line 3: the record names '1.png': .*does not open as an image"):
        pack(path, volume.path("packed"), media={"image": "image"})
    r = pack(path, volume.path("packed"), media={"image": "image"}, on_error="skip")
    assert r.left_out == (f"{path}/r.jsonl, line 3",) and r.files == 3
    assert [row["i"] for row in RowStream(volume.path("packed"))] == [0, 2, 3]


def test_the_cli_packs_records_with_the_readers_options(volume, capsys):
    llava(volume)
    assert main(["pack", volume.path("llava"), volume.path("packed"), "--media", "image=image",
                 "--media-dir", "images"]) == 0
    assert "packed 5 records with their media" in capsys.readouterr().out
    assert main(["pack", volume.path("llava"), volume.path("other"), "--media", "image"]) == 2
    assert "give a column of paths and its kind" in capsys.readouterr().err


def test_media_options_given_to_a_reader_of_a_pack_are_refused(volume):
    llava(volume)
    pack(volume.path("llava"), volume.path("packed"), **LLAVA)
    with pytest.raises(OptionError, match="is a pack, read as it was packed"):
        resolve_source(volume.path("packed"), **LLAVA)
    with pytest.raises(OptionError, match="mode='files' reads a row per file, but .* is a pack of records"):
        UCVolumeDataset(volume.path("packed"))  # files mode


# -- reading: the core -----------------------------------------------------------------------------------


def test_rowstream_and_torch_read_the_pack_as_the_folders_rows(volume):
    image_folder(volume)
    pack(volume.path("imgs"), volume.path("packed"), row_group_size=300)
    assert same_rows(list(RowStream(volume.path("imgs"))), list(RowStream(volume.path("packed"))))
    llava(volume)
    pack(volume.path("llava"), volume.path("llava-packed"), row_group_size=300, **LLAVA)
    loose = list(UCVolumeDataset(volume.path("llava"), mode="rows", **LLAVA))
    packed = list(UCVolumeDataset(volume.path("llava-packed"), mode="rows"))
    assert same_rows(loose, packed) and packed[0]["conversations"][1]["value"] == "picture 0"
    assert [r["caption"] for r in RowStream(volume.path("packed"), columns=["caption"])][:2] == ["test 0", "test 1"]


def test_a_list_of_media_per_record(volume):
    for i in range(3):
        volume.write(f"d/{i}.png", png(i))
    volume.write("d/r.jsonl", jsonl([{"images": ["0.png", "2.png"]}, {"images": []}, {"images": None}]))
    pack(volume.path("d"), volume.path("packed"), media={"images": "image"})
    rows = list(RowStream(volume.path("packed")))
    assert [r["images"] for r in rows] == [[png(0), png(2)], [], None]


def test_the_media_are_read_with_their_row_groups_and_a_second_epoch_reads_nothing(volume, volume_calls):  # noqa: F811
    media = {i: os.urandom(30_000) for i in range(40)}
    for i, data in media.items():
        volume.write(f"m/audio/{i}.bin", data)
    volume.write("m/r.jsonl", jsonl([{"clip": f"audio/{i}.bin", "i": i} for i in range(40)]))
    r = pack(volume.path("m"), volume.path("packed"), media={"clip": "file"}, row_group_size=100_000)
    stream = RowStream(volume.path("packed"), rank=1, world_size=2, shuffle=True)
    calls = volume_calls()
    first = sorted((row["i"], row["clip"]) for row in stream)
    shards = {str(volume.local(f"{r.path[len(volume.vol) + 1:]}/{name}")) for name in r.shards}
    assert calls and set(calls) <= shards  # the shards' ranges alone: no medium opened
    assert [i for i, _ in first] == list(range(20, 40)) and all(clip == media[i] for i, clip in first)
    ranges = [p.name for p in (volume.root.parent / "cache" / "objects").rglob("*") if ".parquet" in p.name]
    assert len(ranges) > 4 and all("-part-" in name for name in ranges)  # row groups' ranges, not the shard
    assert sum(int(n.split("-")[2]) - int(n.split("-")[1]) for n in ranges) < 0.6 * sum(map(len, media.values()))
    calls.clear()
    assert sorted((row["i"], row["clip"]) for row in stream) == first
    assert calls == []  # the node cache holds the rank's row groups


def test_over_the_files_api_a_second_epoch_sends_no_request(files_api):
    image_folder(files_api)
    r = pack(files_api.path("imgs"), files_api.path("packed"), row_group_size=300)
    assert r.records and r.files == 8
    stream = RowStream(files_api.path("packed"))
    first = [(row["caption"], row["image"]) for row in stream]
    assert sorted(first) == sorted((row["caption"], read(row["image"])) for row in RowStream(files_api.path("imgs")))
    files_api.server.clear_trace()
    assert [(row["caption"], row["image"]) for row in stream] == first
    assert files_api.server.trace == []


def test_ranks_and_workers_read_each_record_once_and_resume_exactly(volume):
    many(volume)
    pack(volume.path("m"), volume.path("packed"), media={"image": "image"}, row_group_size=1500)
    seen = []
    for rank in range(2):
        for worker in range(2):
            seen += [row["i"] for row in RowStream(volume.path("packed"), rank=rank, world_size=2, worker=worker,
                                                   num_workers=2)]
    assert sorted(seen) == list(range(40))
    stream = RowStream(volume.path("packed"), shuffle=True, seed=3)
    it = iter(stream)
    head = [next(it)["i"] for _ in range(13)]
    again = RowStream(volume.path("packed"), shuffle=True, seed=3)
    again.load_state_dict(stream.state_dict())
    rest = [row["i"] for row in again]
    whole = [row["i"] for row in RowStream(volume.path("packed"), shuffle=True, seed=3)]
    assert head + rest == whole and sorted(whole) == list(range(40))


# -- reading: HF -------------------------------------------------------------------------------------------


def test_hf_reads_the_pack_with_the_folders_features_splits_and_images(volume):
    image_folder(volume)
    pack(volume.path("imgs"), volume.path("packed"), row_group_size=300)
    loose = datasets.load_dataset("uc-volume", data_dir=volume.path("imgs"), streaming=True)
    packed = datasets.load_dataset("uc-volume", data_dir=volume.path("packed"), streaming=True)
    assert list(packed) == list(loose) == ["train", "test"]
    assert packed["train"].features == loose["train"].features
    for split in ("train", "test"):
        a, b = list(loose[split]), list(packed[split])
        assert [r["caption"] for r in a] == [r["caption"] for r in b]
        assert [r["image"].tobytes() for r in a] == [r["image"].tobytes() for r in b]
    raw = next(iter(packed["test"].decode(False)))
    assert raw["image"]["bytes"] == png(100)
    kept = datasets.load_dataset("uc-volume", data_dir=volume.path("packed"), split="test")  # not streaming
    assert [r["image"].size for r in kept] == [(104, 3), (105, 3)]


def test_hf_state_dict_resumes_a_pack_exactly(volume, tmp_path):
    many(volume)
    pack(volume.path("m"), volume.path("packed"), media={"image": "image"}, row_group_size=500)

    def load():
        return datasets.load_dataset("uc-volume", data_dir=volume.path("packed"), split="train", streaming=True,
                                     shuffle=True, seed=5, cache_dir=str(tmp_path / "hf"))

    full = [r["i"] for r in load()]
    ds = load()
    it = iter(ds)
    head = [next(it)["i"] for _ in range(13)]
    resumed = load()
    resumed.load_state_dict(ds.state_dict())
    assert head + [r["i"] for r in resumed] == full and sorted(full) == list(range(40))


def test_hf_a_list_of_images_from_a_pack(volume):
    for i in range(3):
        volume.write(f"s/images/{i}.png", png(i))
    volume.write("s/chat.jsonl", jsonl([{"messages": [{"role": "user", "content": "hi"}], "images": ["0.png", "1.png"]},
                                        {"messages": [{"role": "user", "content": "yo"}], "images": ["2.png"]}]))
    pack(volume.path("s"), volume.path("packed"), media={"images": "image"}, media_dir="images")
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("packed"), streaming=True, split="train")
    assert ds.features["images"] == datasets.List(datasets.Image())
    rows = list(ds)
    assert [[im.size for im in r["images"]] for r in rows] == [[(4, 3), (5, 3)], [(6, 3)]]
    assert rows[0]["messages"] == [{"role": "user", "content": "hi"}]


# -- reading: Ray ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ray_reads_the_pack_as_the_folders_rows_with_bytes(volume, ray_cluster):
    from air_ray import read_uc_volume

    llava(volume)
    r = pack(volume.path("llava"), volume.path("packed"), row_group_size=300, **LLAVA)
    loose = read_uc_volume(volume.path("llava"), include_bytes=True, **LLAVA)
    packed = read_uc_volume(volume.path("packed"))
    assert packed.schema().names == loose.schema().names
    key = lambda row: row["id"]  # noqa: E731
    assert sorted(packed.take_all(), key=key) == sorted(loose.take_all(), key=key)
    assert set(packed.input_files()) <= {f"{r.path}/{name}" for name in r.shards}
    assert sorted(packed.select_columns(["id"]).take_all(), key=key) == [{"id": str(i)} for i in range(5)]
