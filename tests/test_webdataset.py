"""mode="webdataset": `.tar` shards of samples through the HF and Ray doors, and what the reader refuses."""

from __future__ import annotations

import io
import json
import logging
import pickle
import tarfile

import datasets
import pyarrow as pa
import pytest
from datasets import load_dataset
from PIL import Image

import air_hf
from air_core import resolve_source
from air_core.io.cache import Cache
from air_core.errors import EmptyVolumeError, OptionError, RecordError
from air_core.planning.shares import Planning


@pytest.fixture
def hf_cache(tmp_path):
    return str(tmp_path / "hf")


def load(volume, hf_cache, folder, **options):
    streaming, split = options.pop("streaming", True), options.pop("split", "train")
    return load_dataset("uc-volume", data_dir=volume.path(folder), split=split, streaming=streaming,
                        cache_dir=hf_cache, **options)


def png(shade: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 3), (shade, 10, 20)).save(out, "PNG")
    return out.getvalue()


def jpeg(shade: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (8, 8), shade).save(out, "JPEG")
    return out.getvalue()


def write_tar(volume, rel: str, members: list[tuple[str, bytes]]) -> str:
    """A tar of `members` (name, bytes), in order, at `rel`; returns its volume path."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    volume.write(rel, out.getvalue())
    return volume.path(rel)


def shards(volume, folder: str, counts=(5, 4, 6), *, extra: dict[int, str] | None = None) -> dict[str, dict]:
    """Tars of `counts` samples under `folder`: png, json, cls and (odd samples) txt members, in a subfolder
    of the tar; `extra`: tar index -> an extension one of its samples also has. Returns key -> expected row."""
    expected = {}
    for t, n in enumerate(counts):
        members = []
        rel = f"{folder}/shard-{t:03d}.tar"
        for s in range(n):
            key = f"part{t}/s{t}_{s:03d}"
            members += [(f"{key}.png", png(10 * s)), (f"{key}.json", json.dumps({"id": s, "tag": f"t{t}"}).encode()),
                        (f"{key}.cls", str(s % 3).encode())]
            if s % 2:
                members.append((f"{key}.txt", f"caption {t} {s}".encode()))
            if extra and t in extra and s == n - 1:
                members.append((f"{key}.{extra[t]}", b"\x00\x01"))
            expected[key] = {"__url__": volume.path(rel), "cls": s % 3, "json": {"id": s, "tag": f"t{t}"},
                             "txt": f"caption {t} {s}" if s % 2 else None, "shade": 10 * s}
        write_tar(volume, rel, members)
    return expected


def keys(rows) -> list[str]:
    return [r["__key__"] for r in rows]


# -- HF: rows, features, images --------------------------------------------------------------------


def test_streaming_rows_carry_key_url_typed_members_and_decoded_images(volume, hf_cache):
    expected = shards(volume, "wds")
    ds = load(volume, hf_cache, "wds")
    assert list(ds.features) == ["__key__", "__url__", "cls", "json", "png", "txt"]
    assert ds.features["png"] == datasets.Image()
    assert ds.features["cls"] == datasets.Value("int64") and ds.features["txt"] == datasets.Value("string")
    assert ds.features["json"] == {"id": datasets.Value("int64"), "tag": datasets.Value("string")}
    rows = list(ds)
    assert sorted(keys(rows)) == sorted(expected)
    for r in rows:
        want = expected[r["__key__"]]
        assert (r["__url__"], r["cls"], r["json"], r["txt"]) == (want["__url__"], want["cls"], want["json"],
                                                                 want["txt"])
        assert isinstance(r["png"], Image.Image) and r["png"].size == (4, 3)
        assert r["png"].getpixel((0, 0)) == (want["shade"], 10, 20)


def test_non_streaming_load_keeps_the_image_bytes(volume, hf_cache):
    write_tar(volume, "j/a.tar", [("x.jpg", jpeg(200)), ("x.seg.png", png(5)), ("x.cls", b"7"),
                                  ("y.jpg", jpeg(40)), ("y.cls", b"2")])
    ds = load(volume, hf_cache, "j", streaming=False)
    assert list(ds.features) == ["__key__", "__url__", "cls", "jpg", "seg.png"]
    assert ds.features["jpg"] == datasets.Image() and ds.features["seg.png"] == datasets.Image()
    rows = {r["__key__"]: r for r in ds}
    assert rows["x"]["cls"] == 7 and abs(rows["x"]["jpg"].getpixel((3, 3)) - 200) <= 3
    assert rows["x"]["seg.png"].getpixel((0, 0)) == (5, 10, 20)
    assert rows["y"]["seg.png"] is None and abs(rows["y"]["jpg"].getpixel((0, 0)) - 40) <= 3


def test_features_given_read_members_into_their_types(volume, hf_cache):
    shards(volume, "wds", counts=(3,))
    features = datasets.Features({"__key__": datasets.Value("string"), "cls": datasets.Value("int32"),
                                  "json": {"id": datasets.Value("int16")}, "png": datasets.Image(decode=False),
                                  "txt": datasets.Value("string")})
    # The given features name json's fields: a member with a field they lack is malformed, here skipped as null.
    rows = list(load(volume, hf_cache, "wds", features=features, on_error="skip"))
    assert list(rows[0]) == list(features) and [r["cls"] for r in rows] == [0, 1, 2]
    assert all(r["json"] is None for r in rows)
    # An image gets its path inside the tar: <tar volume path>/<member>.
    assert rows[1]["png"]["path"] == volume.path("wds/shard-000.tar") + "/part0/s0_001.png"
    assert rows[1]["png"]["bytes"] == png(10)
    features["json"] = {"id": datasets.Value("int16"), "tag": datasets.Value("string")}
    rows = list(load(volume, hf_cache, "wds", features=features))
    assert [r["json"] for r in rows] == [{"id": s, "tag": "t0"} for s in range(3)]


def test_columns_read_only_those(volume, hf_cache):
    expected = shards(volume, "wds")
    ds = load(volume, hf_cache, "wds", columns=["__key__", "cls"])
    assert list(ds.features) == ["__key__", "cls"]
    assert sorted((r["__key__"], r["cls"]) for r in ds) == sorted((k, v["cls"]) for k, v in expected.items())


def test_mode_auto_picks_webdataset_for_a_folder_of_tars_only(volume):
    shards(volume, "wds", counts=(2,))
    assert resolve_source(volume.path("wds")).mode == "webdataset"
    volume.write("wds/README.txt", "about")
    with pytest.raises(OptionError, match="mixes WebDataset files"):
        resolve_source(volume.path("wds"))
    with pytest.raises(OptionError, match="mode='webdataset' but .* holds other files"):
        resolve_source(volume.path("wds"), mode="webdataset")
    assert resolve_source(volume.path("wds"), mode="files").mode == "files"


# -- shards, equal counts, shuffle, the cache -------------------------------------------------------


def test_two_ranks_read_every_sample_once(volume, hf_cache):
    expected = shards(volume, "wds", counts=(5, 4, 6, 3, 7, 2))
    ds = load(volume, hf_cache, "wds", world_size=2, num_workers=2)
    assert ds.num_shards == 4
    by_rank = [keys(air_hf.split_for_rank(ds, rank=r, world_size=2)) for r in range(2)]
    every = by_rank[0] + by_rank[1]
    assert sorted(every) == sorted(expected) and by_rank[0] and by_rank[1]


@pytest.mark.parametrize("equalize", ["pad", "drop"])
def test_equalize_gives_every_rank_as_many_samples(volume, hf_cache, equalize):
    expected = shards(volume, "wds", counts=(7, 3, 4))  # 14 samples over 4 shards
    ds = load(volume, hf_cache, "wds", world_size=2, num_workers=2, equalize=equalize)
    by_rank = [keys(air_hf.split_for_rank(ds, rank=r, world_size=2)) for r in range(2)]
    every = by_rank[0] + by_rank[1]
    assert [len(k) for k in by_rank] == ([8, 8] if equalize == "pad" else [6, 6])
    if equalize == "pad":
        assert set(every) == set(expected)
    else:
        assert len(set(every)) == len(every) and set(every) <= set(expected)


def test_reader_deals_row_ranges_of_tars_and_parts_travel_small(volume):
    expected = shards(volume, "wds", counts=(7, 3, 4))
    reader = resolve_source(volume.path("wds")).reader
    pieces = reader.pieces(range(3))
    assert reader.count(pieces) == 14
    dealt = reader.deal(pieces, 3, Planning(equalize="pad"))
    assert [reader.count(p) for p in dealt] == [5, 5, 5]
    part = reader.part(dealt[2], Planning(), epoch=0)
    assert part.rows == 5 and len(pickle.dumps(part)) < 4000
    got = [k for _, t in pickle.loads(pickle.dumps(part)).read(Cache(), columns=["__key__"])
           for k in t.column("__key__").to_pylist()]
    assert len(got) == 5 and set(got) <= set(expected)
    # Without equalize, tars are whole pieces, dealt by bytes, and a part's rows are not known before reading.
    whole = reader.deal(pieces, 2, Planning())
    assert sorted(p.file for share in whole for p in share) == [0, 1, 2]
    assert reader.part(whole[0], Planning(), epoch=0).rows is None


def test_shuffle_is_seeded_inside_tars_and_the_same_every_time(volume, hf_cache):
    expected = shards(volume, "wds", counts=(30, 20))
    plain = keys(load(volume, hf_cache, "wds"))
    first = keys(load(volume, hf_cache, "wds", shuffle=True, seed=3))
    again = keys(load(volume, hf_cache, "wds", shuffle=True, seed=3))
    other = keys(load(volume, hf_cache, "wds", shuffle=True, seed=4))
    assert first == again and first != other and first != plain
    assert sorted(first) == sorted(other) == sorted(plain) == sorted(expected)
    part0 = [k for k in first if k.startswith("part0/")]
    assert part0 != sorted(part0)  # the samples of one tar come in a shuffled order


def test_a_second_pass_reads_nothing_from_the_volume(volume, hf_cache):
    expected = shards(volume, "wds")
    ds = load(volume, hf_cache, "wds")
    first = [(r["__key__"], r["json"], r["png"].tobytes()) for r in ds]
    assert sorted(k for k, _, _ in first) == sorted(expected)
    reader = resolve_source(volume.path("wds")).reader
    cache = Cache()
    tables = list(reader.read_tables(reader.pieces(range(3)), cache, columns=None, fetch_threads=4))
    assert sum(t.num_rows for t in tables) == 15
    assert (cache.stats.misses, cache.stats.hits) == (0, 3)
    for t in range(3):  # the volume's tars are gone: the cached copies serve the second pass
        volume.local(f"wds/shard-{t:03d}.tar").unlink()
    assert [(r["__key__"], r["json"], r["png"].tobytes()) for r in ds] == first


# -- what is refused, and bad input -----------------------------------------------------------------


def test_options_of_files_mode_are_refused(volume, hf_cache):
    shards(volume, "wds", counts=(2,))
    for option in ({"decode": "image"}, {"labels": True}):
        with pytest.raises(OptionError, match="files mode: .* is read as WebDataset samples"):
            load(volume, hf_cache, "wds", **option)


def test_an_extension_missing_from_the_columns_is_an_error_naming_it(volume, hf_cache):
    shards(volume, "wds", counts=(2,) * 5, extra={4: "npy"})  # the first four tars, sampled, have no .npy
    with pytest.raises(RecordError, match=r"shard-004\.tar, sample 'part4/s4_001'.*extension 'npy'.*features="):
        list(load(volume, hf_cache, "wds"))
    features = datasets.Features({"__key__": datasets.Value("string"), "cls": datasets.Value("int64")})
    with pytest.raises(RecordError, match=r"shard-000\.tar.*extension 'png'.*features= \(schema= for Ray\)"):
        list(load(volume, hf_cache, "wds", features=features))


def test_a_corrupt_tar_raises_naming_it_or_is_skipped(volume, hf_cache, caplog):
    expected = shards(volume, "wds", counts=(3, 2))
    volume.write("wds/shard-005.tar", b"not a tar at all" * 100)
    whole = volume.local("wds/shard-001.tar")
    with tarfile.open(whole) as tf:
        cut = tf.getmembers()[-1].offset_data + 1
    volume.write("wds/shard-009.tar", whole.read_bytes()[:cut])  # cut short, inside its last member
    with pytest.raises(RecordError, match=r"shard-005\.tar is not a readable tar file.*on_error='skip'"):
        list(load(volume, hf_cache, "wds"))
    with caplog.at_level(logging.WARNING, logger="air_core"):
        rows = list(load(volume, hf_cache, "wds", on_error="skip"))
    assert sorted(keys(rows)) == sorted(expected)
    assert "shard-005.tar" in caplog.text and "shard-009.tar is not a readable tar file" in caplog.text
    # Counted as holding no samples, so equal counts stay exact.
    ds = load(volume, hf_cache, "wds", on_error="skip", world_size=2, num_workers=1, equalize="pad")
    assert [len(keys(air_hf.split_for_rank(ds, rank=r, world_size=2))) for r in range(2)] == [3, 3]


def test_a_malformed_member_raises_naming_it_or_reads_as_null(volume, hf_cache):
    write_tar(volume, "wds/a.tar", [("x.json", b'{"id": 1}'), ("x.cls", b"1"), ("y.json", b'{"id": 2}'),
                                    ("y.cls", b"2")])
    write_tar(volume, "wds/b.tar", [("z.json", b'{"id": '), ("z.cls", b"three")])
    with pytest.raises(RecordError, match=r"b\.tar, sample 'z', member 'z\.(json|cls)'"):
        list(load(volume, hf_cache, "wds"))
    rows = {r["__key__"]: r for r in load(volume, hf_cache, "wds", on_error="skip")}
    assert rows["z"]["json"] is None and rows["z"]["cls"] is None and rows["y"]["json"] == {"id": 2}


@pytest.mark.parametrize("case, error, words", [
    (lambda v: v.local("empty").mkdir() and None, EmptyVolumeError, ""),
    (lambda v: write_tar(v, "empty/a.tar", []) and write_tar(v, "empty/b.tar", [("README", b"x")]),
     EmptyVolumeError, "holds tar files but no WebDataset samples"),
    (lambda v: v.write("empty/a.tar", b"\x00garbage" * 99), RecordError, "a.tar is not a readable tar file"),
    (lambda v: write_tar(v, "empty/a.tar", [("x.cls", b"1"), ("x.cls", b"2")]), RecordError,
     "two members for the sample 'x' with the extension 'cls'"),
    (lambda v: write_tar(v, "empty/a.tar", [("x.json", b"1"), ("y.json", b'{"a": 1}')]), RecordError,
     "JSON values of no one type"),
], ids=["no-files", "no-samples", "not-a-tar", "duplicate-member", "mixed-json"])
def test_bad_input_fails_clearly_when_resolved(volume, case, error, words):
    case(volume)
    with pytest.raises(error) as e:
        resolve_source(volume.path("empty"), mode="webdataset")
    assert words in str(e.value)


# -- workers and Ray ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_dataloader_workers_read_every_sample_once(volume, hf_cache):
    from torch.utils.data import DataLoader

    expected = shards(volume, "wds", counts=(5, 4, 6, 3))
    ds = load(volume, hf_cache, "wds", num_workers=2, columns=["__key__", "cls"])
    got = [k for batch in DataLoader(ds, batch_size=4, num_workers=2, collate_fn=keys) for k in batch]
    assert sorted(got) == sorted(expected)


@pytest.mark.slow
def test_ray_reads_samples_with_bytes_columns_and_equal_ranks(volume, ray_cluster):
    from air_ray import UCVolumeDatasource, read_uc_volume

    expected = shards(volume, "wds")
    cache = str(volume.root.parent / "given-cache")  # the session's workers keep their own AIR_CACHE_DIR
    ds = read_uc_volume(volume.path("wds"), cache_dir=cache)
    assert ds.schema().names == ["__key__", "__url__", "cls", "json", "png", "txt"]
    assert ds.schema().base_schema.field("png").type == pa.binary()
    rows = ds.take_all()
    assert sorted(keys(rows)) == sorted(expected)
    for r in rows:
        want = expected[r["__key__"]]
        assert r["png"] == png(want["shade"]) and r["__url__"] == want["__url__"] and r["cls"] == want["cls"]
    import ray

    plain = ray.data.read_datasource(UCVolumeDatasource(volume.path("wds"), cache_dir=cache))
    assert sorted(keys(plain.take_all())) == sorted(expected)
    picked = read_uc_volume(volume.path("wds"), cache_dir=cache, columns=["__key__", "txt"])
    assert picked.schema().names == ["__key__", "txt"]
    assert sorted((r["__key__"], r["txt"]) for r in picked.take_all()) == sorted(
        (k, v["txt"]) for k, v in expected.items())
    counts = [ray.data.read_datasource(UCVolumeDatasource(volume.path("wds"), cache_dir=cache, rank=r, world_size=2,
                                                          equalize="drop")).count() for r in range(2)]
    assert counts == [7, 7]
