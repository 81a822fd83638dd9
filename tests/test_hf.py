"""load_dataset("uc-volume", ...): registration, files and Parquet modes, shards, resume, errors."""

from __future__ import annotations

import collections
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import load_dataset
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader

import air_hf
from air_core.errors import AirError, EmptyVolumeError, OptionError, VolumePathError
from air_core.read.parquet_io import ParquetError


@pytest.fixture
def hf_cache(tmp_path):
    return str(tmp_path / "hf")


def load(volume, hf_cache, folder, **options):
    streaming, split = options.pop("streaming", True), options.pop("split", "train")
    return load_dataset("uc-volume", data_dir=volume.path(folder), split=split, streaming=streaming,
                        cache_dir=hf_cache, **options)


def paths(rows) -> list[str]:
    return [r["path"] for r in rows]


def collate_paths(rows):
    return [r["path"] for r in rows]


def write_parquet(volume, rel: str, ids: range, row_group_size: int = 10) -> pa.Table:
    t = pa.table({"id": list(ids), "x": [i / 2 for i in ids]})
    buf = io.BytesIO()
    pq.write_table(t, buf, row_group_size=row_group_size)
    volume.write(rel, buf.getvalue())
    return t


# -- registration -------------------------------------------------------------


def test_registered_without_data_files_resolution(volume, hf_cache, monkeypatch):
    import datasets.data_files
    import datasets.packaged_modules

    assert datasets.packaged_modules._PACKAGED_DATASETS_MODULES[air_hf.NAME][0] == "air_hf.builder"

    def forbidden(*a, **k):
        raise AssertionError("datasets resolved data files for uc-volume")

    for name in ("get_data_patterns", "resolve_pattern"):
        monkeypatch.setattr(datasets.data_files, name, forbidden)
        monkeypatch.setattr(datasets.load, name, forbidden, raising=False)
    # Split-name guessing would keep only c_test.bin; uc-volume keeps every file.
    for name in ("a.bin", "b.bin", "c_test.bin", "d.bin"):
        volume.write(f"flat/{name}", name)
    rows = list(load(volume, hf_cache, "flat"))
    assert sorted(paths(rows)) == [volume.path(f"flat/{n}") for n in ("a.bin", "b.bin", "c_test.bin", "d.bin")]


def test_registration_guard_names_the_moved_internals(monkeypatch):
    import datasets.builder
    import datasets.packaged_modules

    monkeypatch.delattr(datasets.builder.DatasetBuilder, "_create_builder_config")
    with pytest.raises(AirError, match="DatasetBuilder._create_builder_config is gone.*datasets>=4.0,<6"):
        air_hf.register()
    monkeypatch.undo()
    monkeypatch.setattr(datasets.packaged_modules, "_PACKAGED_DATASETS_MODULES", {})
    with pytest.raises(AirError, match="internals moved"):
        air_hf.register()


@pytest.mark.slow
def test_setup_of_2000_files_under_netvol_lists_folders_and_opens_no_file(volume, netvol_so, tmp_path):
    # Opening each file would take 20 s here; how long setup takes is measured by benchmarks/bench_hf.py.
    for k in range(10):
        folder = volume.local(f"many/class{k}")
        folder.mkdir(parents=True)
        for i in range(200):
            (folder / f"f{i:04d}.txt").write_bytes(b"x")
    trace = tmp_path / "trace"
    script = textwrap.dedent(f"""
        import torch, datasets, air_hf
        ds = datasets.load_dataset("uc-volume", data_dir={volume.path('many')!r}, split="train",
                                   streaming=True, cache_dir={str(tmp_path / 'hf')!r})
        print(ds.num_shards)
    """)
    env = {**os.environ, "LD_PRELOAD": netvol_so, "NETVOL_PREFIX": str(volume.root) + "/",
           "NETVOL_OPEN_MS": "10", "NETVOL_LIST_MS": "20", "NETVOL_TRACE": str(trace)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert int(out.stdout) == 12
    lines = trace.read_text().splitlines()
    assert sorted(lines) == sorted([f"list {volume.local('many')}"]
                                   + [f"list {volume.local(f'many/class{k}')}" for k in range(10)])


# -- files mode ------------------------------------------------------------------


def test_file_rows_decoded_and_labelled(volume, hf_cache):
    for k, color in enumerate(("red", "blue")):
        for i in range(3):
            buf = io.BytesIO()
            Image.new("RGB", (4 + i, 3), color).save(buf, "PNG")
            volume.write(f"pics/{color}/p{k}{i}.png", buf.getvalue())
    ds = load(volume, hf_cache, "pics", decode="image", labels=True)
    assert ds.features["label"].names == ["blue", "red"]
    rows = sorted(ds, key=lambda r: r["path"])
    assert len(rows) == 6
    r = rows[0]
    assert r["path"] == volume.path("pics/blue/p10.png") and r["label"] == 0 and r["size"] > 0
    assert r["local_path"] != volume.local("pics/blue/p10.png") and os.path.exists(r["local_path"])
    assert isinstance(r["image"], Image.Image) and r["image"].size == (4, 3)
    assert r["image"].getpixel((0, 0)) == (0, 0, 255)

    volume.write("docs/a.txt", "héllo")
    volume.write("docs/b.txt", b"\xff\xfe")
    text = {r["path"][-5:]: r["text"] for r in load(volume, hf_cache, "docs", include="*a.txt", decode="text")}
    assert text == {"a.txt": "héllo"}
    assert [r["bytes"] for r in load(volume, hf_cache, "docs", include="*b.txt", decode="bytes")] == [b"\xff\xfe"]
    with pytest.raises(AirError, match="b.txt is not UTF-8 text.*decode='bytes'"):
        list(load(volume, hf_cache, "docs", decode="text"))

    volume.write("sounds/a.wav", b"RIFF....WAVE")
    audio = load(volume, hf_cache, "sounds", decode="audio")
    assert isinstance(audio.features["audio"], datasets.Audio)
    (row,) = audio.decode(False)
    assert row["audio"]["path"] == row["local_path"]


def test_non_streaming_media_rows_outlive_the_node_cache(volume, hf_cache, tmp_path):
    buf = io.BytesIO()
    Image.new("RGB", (5, 2), "red").save(buf, "PNG")
    volume.write("shots/a.png", buf.getvalue())
    node = tmp_path / "node-cache"
    ds = load(volume, hf_cache, "shots", streaming=False, decode="image", node_cache_dir=str(node))
    shutil.rmtree(node)  # as a prune or a new node would
    (row,) = ds
    assert row["image"].size == (5, 2) and row["image"].getpixel((0, 0)) == (255, 0, 0)
    assert ds.cast_column("image", datasets.Image(decode=False))[0]["image"]["path"] == volume.path("shots/a.png")


@pytest.mark.slow
def test_streams_through_dataloader_workers_exactly_once(volume, hf_cache):
    expected = volume.files("many", 40)
    ds = load(volume, hf_cache, "many", num_workers=2)
    assert ds.num_shards == 2
    got = [p for batch in DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate_paths) for p in batch]
    assert sorted(got) == expected
    assert len(pickle.dumps(ds)) < 20_000  # the listing travels as a file, not inside the dataset


@pytest.mark.parametrize("equalize", ["none", "pad", "drop"])
def test_shards_balanced_for_every_split(volume, hf_cache, equalize):
    expected = volume.files("many", 50)
    ds = load(volume, hf_cache, "many", world_size=3, num_workers=2, equalize=equalize)
    assert ds.num_shards == 6
    by_rank = [paths(air_hf.split_for_rank(ds, rank=r, world_size=3)) for r in range(3)]
    contiguous = [paths(ds.shard(num_shards=3, index=r, contiguous=True)) for r in range(3)]
    for split in (by_rank, contiguous):
        counts = [len(s) for s in split]
        every = [p for s in split for p in s]
        if equalize == "none":
            assert sorted(every) == expected and max(counts) - min(counts) <= 2
        else:
            assert len(set(counts)) == 1 and set(every) <= set(expected)
            assert counts[0] == (18 if equalize == "pad" else 16)  # 2 shards of 9 (pad) or 8 (drop)
            assert set(every) == set(expected) if equalize == "pad" else len(set(every)) == len(every)


def test_split_for_rank_refuses_the_read_everything_fallback(volume, hf_cache):
    volume.files("many", 10)
    ds = load(volume, hf_cache, "many", world_size=2, num_workers=2)
    with pytest.raises(OptionError, match="4 shards.*3 ranks.*world_size="):
        air_hf.split_for_rank(ds, rank=0, world_size=3)
    assert air_hf.split_for_rank(ds, rank=0, world_size=1) is ds


def test_set_epoch_reshuffles_alike_on_every_rank(volume, hf_cache):
    expected = volume.files("many", 48)

    def epoch_orders(rank):
        ds = air_hf.split_for_rank(load(volume, hf_cache, "many", world_size=2, num_workers=3, shuffle=True,
                                        seed=7), rank=rank, world_size=2)
        out = []
        for e in range(2):
            ds.set_epoch(e)
            out.append(paths(ds))
        return out

    first, again, other = epoch_orders(0), epoch_orders(0), epoch_orders(1)
    assert first == again  # the same on every process that asks
    for e in range(2):
        assert sorted(first[e] + other[e]) == expected
    assert first[0] != first[1]
    assert first[0] != sorted(first[0])


@pytest.mark.parametrize("world_size, epoch", [(1, 0), (2, 1)])
@pytest.mark.parametrize("mode", ["json", "parquet"])
def test_rows_are_not_converted_by_datasets(volume, hf_cache, monkeypatch, world_size, epoch, mode):
    # datasets cuts the tables of an iterable that reports no features into one-row tables, one conversion
    # each; the builder's iterable reports its features, through set_epoch and split_dataset_by_node, and gives
    # its own Python rows.
    if mode == "json":
        volume.write("chat/a.jsonl", "".join(json.dumps({"id": i, "text": f"t{i}"}) + "\n" for i in range(400)))
    else:
        write_parquet(volume, "chat/a.parquet", range(400), row_group_size=100)
    ds = load(volume, hf_cache, "chat", world_size=world_size, num_workers=2, shuffle=True)
    ds.set_epoch(epoch)
    sizes = []
    convert = datasets.formatting.PythonFormatter.format_batch
    monkeypatch.setattr(datasets.formatting.PythonFormatter, "format_batch",
                        lambda self, table: sizes.append(len(table)) or convert(self, table))
    ids = [r["id"] for rank in range(world_size) for r in air_hf.split_for_rank(ds, rank=rank, world_size=world_size)]
    assert sorted(ids) == list(range(400))
    assert sizes == []


def test_state_dict_resumes_exactly(volume, hf_cache):
    volume.files("many", 30)
    ds = load(volume, hf_cache, "many", num_workers=3)
    full = paths(ds)
    it = iter(ds)
    head = [next(it)["path"] for _ in range(13)]
    state = ds.state_dict()
    resumed = load(volume, hf_cache, "many", num_workers=3)
    resumed.load_state_dict(state)
    assert head + paths(resumed) == full


@pytest.mark.slow
def test_stateful_dataloader_resumes_exactly(volume, hf_cache):
    volume.files("many", 40)

    def loader():
        ds = load(volume, hf_cache, "many", num_workers=2)
        return StatefulDataLoader(ds, batch_size=3, num_workers=2, collate_fn=collate_paths)

    full = [p for b in loader() for p in b]
    first = loader()
    it = iter(first)
    head = [p for _ in range(5) for p in next(it)]
    state = first.state_dict()
    second = loader()
    second.load_state_dict(state)
    rest = [p for b in second for p in b]
    assert sorted(head + rest) == sorted(full) and len(head + rest) == len(full)
    assert head + rest == full


def test_non_streaming_cache_follows_the_files(volume, hf_cache):
    volume.files("many", 9)
    first = load(volume, hf_cache, "many", streaming=False, decode="bytes")
    assert len(first) == 9 and first.cache_files
    again = load(volume, hf_cache, "many", streaming=False, decode="bytes")
    assert again.cache_files == first.cache_files
    volume.write("many/class0/new.bin", b"new")
    changed = load(volume, hf_cache, "many", streaming=False, decode="bytes")
    assert len(changed) == 10 and changed.cache_files != first.cache_files
    assert b"new" in changed["bytes"]


# -- Parquet mode ------------------------------------------------------------------


def test_parquet_rows_with_partition_columns(volume, hf_cache):
    write_parquet(volume, "tab/split=train/a.parquet", range(0, 40))
    write_parquet(volume, "tab/split=train/b.parquet", range(40, 70))
    write_parquet(volume, "tab/split=test/c.parquet", range(70, 85))
    ds = load(volume, hf_cache, "tab", world_size=2, num_workers=2, equalize="none")
    assert list(ds.features) == ["id", "x", "split"] and ds.num_shards == 4
    rows = sorted(ds, key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(85))
    assert rows[0]["split"] == "train" and rows[80]["split"] == "test" and rows[3]["x"] == 1.5
    counts = [sum(1 for _ in air_hf.split_for_rank(ds, rank=r, world_size=2)) for r in range(2)]
    assert sorted(counts) == [42, 43]
    equal = load(volume, hf_cache, "tab", world_size=2, num_workers=2, equalize="drop")
    counts = [sum(1 for _ in air_hf.split_for_rank(equal, rank=r, world_size=2)) for r in range(2)]
    assert counts == [42, 42]
    table = load(volume, hf_cache, "tab", streaming=False)
    assert sorted(table["id"]) == list(range(85)) and set(table["split"]) == {"train", "test"}
    picked = load(volume, hf_cache, "tab", columns=["split", "id"])
    assert list(picked.features) == ["split", "id"]
    assert sorted((r["id"], r["split"]) for r in picked) == [(r["id"], r["split"]) for r in rows]
    assert list(next(iter(picked))) == ["split", "id"]


def test_splits_come_from_split_folders_or_hub_shard_names():
    from air_hf.split_layout import by_split

    assert by_split(["a.bin", "c_test.bin", "runs/eval-3/x.bin"]) == {"train": [0, 1, 2]}  # no keyword guessing
    layout = ["dev/dog/4.jpg", "test/cat/1.jpg", "train/cat/2.jpg", "train/dog/5.jpg", "valid/dog/3.jpg"]
    assert by_split(layout) == {"train": [2, 3], "validation": [0, 4], "test": [1]}
    hub = ["data/extra.v2-00000-of-00001.parquet", "data/test-00000-of-00001.parquet",
           "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"]
    assert by_split(hub) == {"train": [2, 3], "test": [1], "extra.v2": [0]}
    with pytest.raises(OptionError, match=r"top-level folders named for splits .* 1 file\(s\) are in none of "
                                          r"them, e.g\. README\.md: leave them out with exclude="):
        by_split(["README.md", "train/a.jpg"])
    # Names beside a split's folder that sort into it (train-x/, train.txt, trainer/) are not in it.
    near = ["data.csv", "test", "train-x/a.jpg", "train.txt", "train/a.jpg", "train/b/c.jpg", "trainer/d.jpg"]
    with pytest.raises(OptionError, match=r"5 file\(s\) are in none of them, e\.g\. data\.csv, test, train-x/a\.jpg:"):
        by_split(near)
    assert by_split(["dev/a", "dev/b", "test/c", "val/d"]) == {"validation": [0, 1, 3], "test": [2]}
    with pytest.raises(OptionError, match=r"data/\{split\}.* 2 file\(s\) are in none of them, e\.g\. a\.txt, "
                                          r"data/notes\.md:"):
        by_split(["a.txt", "data/notes.md", "data/train-00000-of-00001.parquet"])


def test_split_folders_are_splits_and_each_reads_only_its_files(volume, hf_cache):
    for split, n in (("train", 6), ("test", 3)):
        for i in range(n):
            volume.write(f"sp/{split}/{'cat' if i % 2 else 'dog'}/{split}{i}.bin", f"{split} {i}")
    train = load(volume, hf_cache, "sp", labels=True)
    assert sorted(r["path"].rsplit("/", 1)[1] for r in train) == [f"train{i}.bin" for i in range(6)]
    assert train.features["label"].names == ["cat", "dog"]
    both = load_dataset("uc-volume", data_dir=volume.path("sp"), streaming=True, cache_dir=hf_cache)
    assert list(both) == ["train", "test"]
    assert sorted(r["path"].rsplit("/", 1)[1] for r in both["test"]) == [f"test{i}.bin" for i in range(3)]
    arrow = load_dataset("uc-volume", data_dir=volume.path("sp"), cache_dir=hf_cache)
    assert {k: v.num_rows for k, v in arrow.items()} == {"train": 6, "test": 3}

    write_parquet(volume, "hub/data/train-00000-of-00002.parquet", range(0, 30))
    write_parquet(volume, "hub/data/train-00001-of-00002.parquet", range(30, 50))
    write_parquet(volume, "hub/data/test-00000-of-00001.parquet", range(50, 60))
    assert sorted(r["id"] for r in load(volume, hf_cache, "hub")) == list(range(50))
    assert sorted(r["id"] for r in load(volume, hf_cache, "hub", split="test")) == list(range(50, 60))


def test_delta_table_exported_then_streamed(volume, hf_cache):
    from deltalake import write_deltalake

    ids = list(range(25))
    write_deltalake(str(volume.local("delta/t")), pa.table({"id": ids, "part": [str(i % 2) for i in ids]}),
                    partition_by=["part"])
    ds = load(volume, hf_cache, "exports/t", delta_table=volume.path("delta/t"))
    rows = sorted(ds, key=lambda r: r["id"])
    assert [r["id"] for r in rows] == ids and [r["part"] for r in rows[:2]] == ["0", "1"]


# -- bad inputs ---------------------------------------------------------------------


def _files(volume):
    volume.files("many", 4)
    return "many"


def _empty(volume):
    (volume.local_vol / "empty").mkdir()
    return "empty"


def _loose(volume):
    volume.write("loose/a.bin", b"a")
    return "loose"


def _mixed(volume):
    write_parquet(volume, "mixed/a.parquet", range(3))
    volume.write("mixed/notes.txt", "hi")
    return "mixed"


def _corrupt(volume):
    write_parquet(volume, "corrupt/a.parquet", range(3))
    volume.write("corrupt/b.parquet", b"PAR1 not really")
    return "corrupt"


def _only_garbage(volume):
    volume.write("corrupt0/a.parquet", b"garbage")
    return "corrupt0"


def _two_schemas(volume):
    write_parquet(volume, "schemas/a.parquet", range(3))
    pq.write_table(pa.table({"id": ["three"]}), volume.local("schemas/b.parquet"))
    return "schemas"


@pytest.mark.parametrize("call, error, match", [
    pytest.param(lambda v, c: load(v, c, _files(v), shufle=True), OptionError,
                 "unknown option 'shufle'.*did you mean 'shuffle'", id="misspelt-option"),
    pytest.param(lambda v, c: load_dataset("uc-volume", split="train", streaming=True, cache_dir=c), OptionError,
                 "needs data_dir=", id="no-data-dir"),
    pytest.param(lambda v, c: load_dataset("uc-volume", data_dir="/tmp/x", split="train", streaming=True,
                                           cache_dir=c), VolumePathError, "not a Unity Catalog volume path",
                 id="not-a-volume"),
    pytest.param(lambda v, c: load_dataset("uc-volume", data_dir=v.path(_files(v)), data_files=["a"], split="train",
                                           cache_dir=c), OptionError, "takes no data_files=.*include=",
                 id="data-files"),
    pytest.param(lambda v, c: load(v, c, _files(v), decode="pixels"), OptionError, "decode='pixels'.*choose one of",
                 id="unknown-decode"),
    pytest.param(lambda v, c: load(v, c, _files(v), num_workers=0), OptionError, "num_workers=0", id="zero-workers"),
    pytest.param(lambda v, c: load(v, c, _files(v), world_size=3, num_workers=2, equalize="drop"), OptionError,
                 "equalize='drop' with 4 files over 6 shards", id="drop-with-fewer-files-than-shards"),
    pytest.param(lambda v, c: load(v, c, _empty(v)), EmptyVolumeError, "holds no file", id="empty-folder"),
    pytest.param(lambda v, c: load(v, c, _loose(v), labels=True), OptionError, "lies in no class folder",
                 id="labels-without-class-folders"),
    pytest.param(lambda v, c: load(v, c, _files(v), decode="image"), OptionError,
                 r"decode='image' reads image files, but 4 of the 4 files .* "
                 r"\(e\.g\. class0/f00000\.bin, .*exclude='\*\.bin'", id="image-decode-of-other-files"),
    pytest.param(lambda v, c: load(v, c, _mixed(v)), OptionError, "mixes Parquet files.*mode='files'",
                 id="mixed-folder"),
    pytest.param(lambda v, c: load(v, c, _mixed(v), mode="parquet", include="*.parquet", decode="bytes"),
                 OptionError, "decode= applies to files mode", id="files-options-in-parquet-mode"),
    pytest.param(lambda v, c: load(v, c, _mixed(v), include="*.parquet", columns=["nope"]), OptionError,
                 r"columns=\['nope'\]: give a non-empty list of the rows' columns, \['id', 'x'\]",
                 id="unknown-column"),
    pytest.param(lambda v, c: load(v, c, _mixed(v), mode="files", columns=["id"]), OptionError,
                 "columns= applies to Parquet mode", id="columns-in-files-mode"),
    pytest.param(lambda v, c: load(v, c, _mixed(v), include="*.parquet", columns="id"), OptionError,
                 "columns='id': give a non-empty list", id="columns-not-a-list"),
    pytest.param(lambda v, c: load(v, c, _corrupt(v)), ParquetError, "b.parquet is not a readable Parquet file",
                 id="corrupt-parquet"),
    pytest.param(lambda v, c: load(v, c, _only_garbage(v)), ParquetError, "a.parquet is not a readable Parquet file",
                 id="only-corrupt-parquet"),
    pytest.param(lambda v, c: load(v, c, _two_schemas(v)), ParquetError,
                 "b.parquet and .*a.parquet have different columns", id="two-schemas"),
])
def test_bad_inputs_fail_clearly(volume, hf_cache, call, error, match):
    with pytest.raises(error, match=match):
        call(volume, hf_cache)


def test_a_mixed_folder_reads_as_files_when_asked(volume, hf_cache):
    assert len(list(load(volume, hf_cache, _mixed(volume), mode="files"))) == 2


def test_demo_section(volume, capsys):
    from air_core.cli.demo import DEMO_VOLUME, build_volume

    from air_hf.demo import run

    build_volume(str(volume.root))
    run(DEMO_VOLUME)
    out = capsys.readouterr().out
    assert "2 shards, labels ['cat', 'dog', 'fish']" in out
    assert "epoch 1: 300 images decoded" in out and "4 shards, rows per rank [150, 150]" in out


# -- mixtures -----------------------------------------------------------------


def test_a_mixture_reads_each_sources_share_in_equal_shards(volume, hf_cache):
    volume.files("chat", 40)
    volume.files("safety", 6)
    sources = [{"path": volume.path("chat"), "proportion": 0.75}, {"path": volume.path("safety"), "proportion": 0.25}]
    ds = load_dataset("uc-volume", sources=sources, epoch_size=48, split="train", streaming=True, cache_dir=hf_cache,
                      world_size=2, num_workers=2, equalize="pad", shuffle=True, decode="bytes")
    assert ds.num_shards == 4
    by_rank = [list(air_hf.split_for_rank(ds, rank=r, world_size=2)) for r in range(2)]
    assert [len(rows) for rows in by_rank] == [24, 24]
    got = [r["path"] for rows in by_rank for r in rows]
    chat = [p for p in got if "/chat/" in p]
    safety = [p for p in got if "/safety/" in p]
    assert len(chat) == 36 and len(set(chat)) == 36  # 36 of 40, none twice
    assert len(safety) == 12 and set(collections.Counter(safety).values()) == {2}  # 6 files, twice each
    assert all(len(r["bytes"]) == r["size"] for rows in by_rank for r in rows)


def seen_epochs(shards, epoch):
    yield 0, pa.table({"shard": shards, "epoch": [epoch] * len(shards)})


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_datasets_tells_an_epoch_to_the_tables_function_through_its_seed_shifts(workers):
    # The private protocol air_hf.examples relies on: if a release of datasets changes it, this fails first.
    from datasets.iterable_dataset import ArrowExamplesIterable

    from air_hf.examples import EPOCH, Tables

    plain = ArrowExamplesIterable(seen_epochs, {"shards": [0, 1, 2, 3, 4, 5, 6, 7], EPOCH: 0})
    ds = datasets.IterableDataset(Tables.of(plain, None, lambda **kw: ((k, t.to_pylist()) for k, t in seen_epochs(**kw))))
    mine = air_hf.split_for_rank(ds.shuffle(seed=1, buffer_size=2), rank=1, world_size=2)
    loader = DataLoader(mine, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
    for epoch in (0, 1, 5):
        mine.set_epoch(epoch)
        rows = list(loader)
        assert {r["epoch"] for r in rows} == {epoch}, "datasets no longer shifts seeds by the epoch as 5.2 does"
        assert len(rows) == 4

    class Batches(IterableDataset):
        """A user's dataset that calls `iter(batch_size=)` itself, inside each DataLoader worker."""

        def __iter__(self):
            return mine.iter(batch_size=2)

    for epoch in (0, 3):
        mine.set_epoch(epoch)
        batches = list(DataLoader(Batches(), batch_size=None, num_workers=workers))
        assert {e for b in batches for e in b["epoch"]} == {epoch}, "a worker's own shift read as the epoch's"
        assert sum(len(b["epoch"]) for b in batches) == 4 * max(workers, 1)  # each worker reads the rank's shards


def mixture_epoch(sources, epoch, **opts):
    """The epoch's files as the core's planner reads them, one stream alone."""
    from air_core import FileStream

    stream = FileStream(sources=sources, **opts)
    stream.set_epoch(epoch)
    return collections.Counter(f.path for f in stream)


def test_a_mixture_reads_the_epoch_set_on_the_dataset_it_iterates(volume, hf_cache):
    volume.files("chat", 40)
    volume.files("safety", 6)
    sources = [{"path": volume.path("chat"), "proportion": 0.75}, {"path": volume.path("safety"), "proportion": 0.25}]
    ds = load_dataset("uc-volume", sources=sources, epoch_size=24, split="train", streaming=True, cache_dir=hf_cache,
                      world_size=2, num_workers=2, shuffle=True, seed=5)
    chat_seen = collections.Counter()
    for epoch in range(3):
        got = collections.Counter()
        for rank in range(2):
            mine = air_hf.split_for_rank(ds, rank=rank, world_size=2)
            mine.set_epoch(epoch)  # on the dataset iterated, not the one loaded: as Trainer and users do
            got.update(paths(mine))
        assert got == mixture_epoch(sources, epoch, epoch_size=24, shuffle=True, seed=5)
        assert sum(c for p, c in got.items() if "/chat/" in p) == 18
        assert sum(c for p, c in got.items() if "/safety/" in p) == 6
        chat_seen.update({p: c for p, c in got.items() if "/chat/" in p})
    assert len(chat_seen) == 40  # 54 draws of 40 files: every one before any twice
    assert sorted(chat_seen.values()) == [1] * 26 + [2] * 14


def test_a_mixture_resumes_mid_epoch_past_the_first(volume, hf_cache):
    volume.files("chat", 30)
    volume.files("safety", 4)
    sources = [{"path": volume.path("chat"), "choose": 12}, {"path": volume.path("safety"), "choose": 8}]
    ds = load_dataset("uc-volume", sources=sources, split="train", streaming=True, cache_dir=hf_cache,
                      world_size=1, num_workers=2)
    ds.set_epoch(2)
    it = iter(ds)
    before = [next(it)["path"] for _ in range(7)]
    state = ds.state_dict()
    again = load_dataset("uc-volume", sources=sources, split="train", streaming=True, cache_dir=hf_cache,
                         world_size=1, num_workers=2)
    again.set_epoch(2)
    again.load_state_dict(state)
    assert collections.Counter(before + paths(again)) == mixture_epoch(sources, 2)


def test_a_mixture_of_tables_reads_the_epoch_set_on_the_dataset_it_iterates(volume, hf_cache):
    path = volume.local("chat/part-0.parquet")
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"id": list(range(60)), "src": ["chat"] * 60}), path, row_group_size=8)
    volume.write("code/a.jsonl", "".join(json.dumps({"id": 100 + i, "src": "code"}) + "\n" for i in range(9)))
    sources = [{"path": volume.path("chat"), "choose": 40}, {"path": volume.path("code"), "choose": 18}]
    ds = load_dataset("uc-volume", sources=sources, split="train", streaming=True, cache_dir=hf_cache,
                      world_size=2, num_workers=2, shuffle=True)
    from air_core import RowStream

    for epoch in range(3):
        got = collections.Counter()
        for rank in range(2):
            mine = air_hf.split_for_rank(ds, rank=rank, world_size=2)
            mine.set_epoch(epoch)
            got.update(r["id"] for r in mine)
        alone = RowStream(sources=sources, shuffle=True)
        alone.set_epoch(epoch)
        assert got == collections.Counter(r["id"] for r in alone)
        assert sum(c for i, c in got.items() if i < 100) == 40 and sum(c for i, c in got.items() if i >= 100) == 18
    srcs = [r["src"] for r in air_hf.split_for_rank(ds, rank=1, world_size=2)]
    assert sum(a != b for a, b in zip(srcs, srcs[1:])) > 4  # inside a shard, the sources' rows interleave
    first, second = (collections.Counter(r["id"] for r in ds) for _ in range(2))
    ds.set_epoch(1)
    assert first == second != collections.Counter(r["id"] for r in ds)


@pytest.mark.slow
def test_a_mixture_reads_each_epoch_once_through_persistent_dataloader_workers(volume, hf_cache):
    volume.files("chat", 40)
    volume.files("safety", 5)
    sources = [{"path": volume.path("chat"), "proportion": 0.7}, {"path": volume.path("safety"), "proportion": 0.3}]
    ds = load_dataset("uc-volume", sources=sources, epoch_size=30, split="train", streaming=True, cache_dir=hf_cache,
                      world_size=2, num_workers=2, shuffle=True)
    ranks = [air_hf.split_for_rank(ds, rank=r, world_size=2) for r in range(2)]
    # Persistent workers keep their copy of the dataset: the epoch reaches them through shared memory.
    loaders = [DataLoader(d, batch_size=4, num_workers=2, collate_fn=collate_paths, persistent_workers=True)
               for d in ranks]
    for epoch in range(3):
        got = collections.Counter()
        for d, loader in zip(ranks, loaders):
            d.set_epoch(epoch)
            got.update(p for batch in loader for p in batch)
        assert got == mixture_epoch(sources, epoch, epoch_size=30, shuffle=True)
        assert sum(c for p, c in got.items() if "/chat/" in p) == 21
        assert sum(c for p, c in got.items() if "/safety/" in p) == 9


def test_a_prepared_mixture_is_prepared_again_when_a_later_source_changes(volume, hf_cache):
    volume.files("chat", 10)
    volume.files("safety", 3)
    sources = [{"path": volume.path("chat"), "repeat": 1}, {"path": volume.path("safety"), "repeat": 1}]
    assert len(load_dataset("uc-volume", sources=sources, split="train", cache_dir=hf_cache)) == 13
    volume.write("safety/class0/more.bin", b"more")  # the same options and first source: the cache id must differ
    assert len(load_dataset("uc-volume", sources=sources, split="train", cache_dir=hf_cache)) == 14


def test_a_mixture_of_tables_reads_each_sources_rows_in_equal_shards(volume, hf_cache):
    for f in range(2):
        path = volume.local(f"chat/part-{f}.parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": list(range(30 * f, 30 * f + 30)), "src": ["chat"] * 30}), path,
                       row_group_size=8)
    volume.write("code/a.jsonl", "".join(json.dumps({"id": 100 + i, "src": "code"}) + "\n" for i in range(9)))
    sources = [{"path": volume.path("chat"), "choose": 40}, {"path": volume.path("code"), "choose": 18}]
    ds = load_dataset("uc-volume", sources=sources, split="train", streaming=True, cache_dir=hf_cache,
                      world_size=2, num_workers=2, equalize="pad", shuffle=True)
    assert ds.features == datasets.Features({"id": datasets.Value("int64"), "src": datasets.Value("string")})
    by_rank = [[r["id"] for r in air_hf.split_for_rank(ds, rank=r, world_size=2)] for r in range(2)]
    assert [len(rows) for rows in by_rank] == [30, 30]  # 58 rows (40 of chat's 60, code's 9 twice) in 4 shards of 15
    got = collections.Counter(i for rows in by_rank for i in rows)
    assert len([i for i in got if i < 100]) == 40 and {i for i in got if i >= 100} == set(range(100, 109))
    prepared = load_dataset("uc-volume", sources=sources, split="train", cache_dir=hf_cache, shuffle=True)
    got = collections.Counter(prepared["id"])  # without equalize: the epoch's rows, exactly
    assert sorted(c for i, c in got.items() if i < 100) == [1] * 40
    assert {i: c for i, c in got.items() if i >= 100} == {100 + i: 2 for i in range(9)}


def test_a_mixture_refuses_what_it_does_not_read_yet(volume, hf_cache):
    volume.files("chat", 4)
    sources = [{"path": volume.path("chat"), "repeat": 1}]
    with pytest.raises(OptionError, match="labels=True is not read over a mixture"):
        load_dataset("uc-volume", sources=sources, labels=True, split="train", streaming=True, cache_dir=hf_cache)
    with pytest.raises(OptionError, match="give data_dir= in each source's dict"):
        load_dataset("uc-volume", sources=sources, data_dir=volume.path("chat"), split="train", streaming=True,
                     cache_dir=hf_cache)
    with pytest.raises(OptionError, match=r"sources\[0\] .*exactly one weight"):
        load_dataset("uc-volume", sources=[{"path": volume.path("chat")}], split="train", streaming=True,
                     cache_dir=hf_cache)
    volume.write("rows/a.jsonl", '{"x": 1}\n')
    with pytest.raises(OptionError, match=r"sources\[0\] \(.*chat\) is read as loose files but sources\[1\] "
                                          r"\(.*rows\) as a table's rows \(mode 'json'\)"):
        load_dataset("uc-volume", sources=sources + [{"path": volume.path("rows"), "repeat": 1}],
                     split="train", streaming=True, cache_dir=hf_cache)
    as_files = load_dataset("uc-volume", sources=sources + [{"path": volume.path("rows"), "repeat": 1}], mode="files",
                            split="train", streaming=True, cache_dir=hf_cache)
    assert sorted(r["path"].rsplit("/", 1)[1] for r in as_files) == ["a.jsonl"] + [f"f{i:05d}.bin" for i in range(4)]
    with pytest.raises(OptionError, match="mode='json' beside sources=: give mode= in each source's dict"):
        load_dataset("uc-volume", sources=sources, mode="json", split="train", streaming=True, cache_dir=hf_cache)
    with pytest.raises(OptionError, match=r"sources\[1\] \(.*rows\) asks for mode 'json', a table's rows, in a "
                                          r"mixture of loose files: mix tables' rows with load_dataset\('uc-volume'"):
        load_dataset("uc-volume", sources=sources + [{"path": volume.path("rows"), "repeat": 1, "mode": "json"}],
                     mode="files", split="train", streaming=True, cache_dir=hf_cache)
    with pytest.raises(OptionError, match=r"sources\[1\] \(.*rows\) is read in mode 'json' \(what its files are\), a "
                                          r"table's rows, in a mixture of loose files: mix tables' rows with "
                                          r"load_dataset\('uc-volume'"):
        load_dataset("uc-volume", sources=sources + [{"path": volume.path("rows"), "repeat": 1, "mode": "auto"}],
                     mode="files", split="train", streaming=True, cache_dir=hf_cache)
