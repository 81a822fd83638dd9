"""One way in: every front door resolves what it reads through `air_core.resolve_source`, so the same
input gets the same rows, or the same error, from FileStream, the uc-volume builder and UCVolumeDatasource."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import load_dataset

import air_core.source
from air_core.io.cache import Cache
import air_hf  # noqa: F401  (registers uc-volume)
from air_core import (
    EmptyVolumeError, FileStream, ManifestMismatchError, OptionError, ParquetError, pack, resolve_source,
)
from air_ray import UCVolumeDatasource


def open_stream(path: str, **options):
    return FileStream(path, **options)


def open_hf(path: str, **options):
    return load_dataset("uc-volume", data_dir=path, split="train", streaming=True, **options)


def open_ray(path: str, **options):
    return UCVolumeDatasource(path, **options)


DOORS = {"stream": open_stream, "hf": open_hf, "ray": open_ray}


def write_parquet(volume, rel: str, ids) -> None:
    volume.local(rel).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": list(ids), "x": [float(i) for i in ids]}), volume.local(rel))


def files(volume):
    volume.files("d", 4)
    return volume.path("d")


def mixed(volume):
    write_parquet(volume, "m/a.parquet", range(3))
    volume.write("m/notes.txt", "hi")
    return volume.path("m")


def empty(volume):
    volume.local("empty").mkdir()
    return volume.path("empty")


def table(volume):
    write_parquet(volume, "t/a.parquet", range(3))
    return volume.path("t")


def packed(volume):
    volume.files("loose", 6)
    pack(volume.path("loose"), volume.path("packed"))
    return volume.path("packed")


CASES = [
    # (folder, options, doors that take these options, error, words in the message)
    (files, {"mode": "parquet"}, ("hf", "ray"), OptionError, "mode='parquet' but"),
    (mixed, {}, ("hf", "ray"), OptionError, "mixes Parquet files"),
    (files, {"mode": "rows"}, ("hf", "ray"), OptionError, "mode='rows': choose one of"),
    (files, {"delta_version": 3}, ("hf", "ray"), OptionError, "go with delta_table="),
    (files, {"delta_table": "/tmp/t", "mode": "files"}, ("hf", "ray"), OptionError, "leave mode unset"),
    (files, {"file_extensions": ["jpg"]}, ("hf", "ray"), EmptyVolumeError, "file_extensions=['jpg']"),
    (files, {"include": "*.jpg"}, ("stream", "hf", "ray"), EmptyVolumeError, "holds no file matching"),
    (empty, {}, ("stream", "hf", "ray"), EmptyVolumeError, "holds no file"),
    (files, {"equalize": "even"}, ("stream", "hf", "ray"), OptionError, "equalize='even': choose one of"),
    (files, {"fetch_threads": 0}, ("stream", "hf", "ray"), OptionError, "fetch_threads=0: give a whole number"),
    (table, {"columns": ["nope"]}, ("hf",), OptionError, "give a non-empty list of the rows' columns, ['id', 'x']"),
    # An option that does not apply to the format: the reader's words, the same at every door that takes it.
    (packed, {"on_error": "skip"}, ("stream", "hf", "ray"), OptionError,
     "on_error= applies to loose files: /Volumes/main/ml/raw/packed is a pack, read a row group at a time"),
    (table, {"on_error": "skip"}, ("hf", "ray"), OptionError,
     "on_error= applies to files mode: /Volumes/main/ml/raw/t is read as Parquet"),
]


@pytest.mark.parametrize("door, folder, options, error, words", [
    (door, folder, options, error, words) for folder, options, doors, error, words in CASES for door in doors
], ids=[f"{door}-{c[0].__name__}-{'-'.join(c[1]) or 'plain'}" for c in CASES for door in c[2]])
def test_front_doors_refuse_the_same_input_with_the_same_words(volume, tmp_path, door, folder, options, error,
                                                               words):
    extra = {"cache_dir": str(tmp_path / "hf")} if door == "hf" else {}
    with pytest.raises(error) as e:
        DOORS[door](folder(volume), **options, **extra)
    assert words in str(e.value)


@pytest.mark.parametrize("door", ["hf", "ray"])
def test_unknown_options_are_named_with_the_closest_known_one(volume, tmp_path, door):
    extra = {"cache_dir": str(tmp_path / "hf")} if door == "hf" else {}
    with pytest.raises(OptionError, match="unknown option 'fil_extensions' \\(did you mean 'file_extensions'\\?\\)"):
        DOORS[door](files(volume), fil_extensions=["bin"], **extra)


def read_contents(door: str, path: str, tmp_path, **options) -> list[bytes]:
    """Every file's bytes as the front door `door` delivers them, read in this process."""
    if door == "stream":
        return [f.read_bytes() for f in FileStream(path, **options)]
    if door == "hf":
        return [r["bytes"] for r in open_hf(path, decode="bytes", cache_dir=str(tmp_path / "hf"), **options)]
    if door == "ray":
        tasks = open_ray(path, include_bytes=True, **options).get_read_tasks(2)
        return [b for task in tasks for block in task() for b in block.column("bytes").to_pylist()]
    from air_core.torch import UCVolumeDataset

    return [open(p, "rb").read() for p in UCVolumeDataset(path, **options)]


@pytest.mark.parametrize("door", ["stream", "hf", "ray", "torch"])
def test_verify_makes_every_front_door_fetch_again_a_copy_whose_bytes_changed(volume, tmp_path, door):
    from test_cache import copies, flip_a_byte

    volume.files("d", 6)
    want = sorted(read_contents("stream", volume.path("d"), tmp_path, verify=True))  # copies with checksums
    for p in copies(os.environ["AIR_CACHE_DIR"]):
        flip_a_byte(p)
    assert sorted(read_contents(door, volume.path("d"), tmp_path, verify=True)) == want
    assert Cache().damaged() == 6
    with pytest.raises(OptionError, match="verify=1: give True or False"):
        read_contents(door, volume.path("d"), tmp_path, verify=1)


def test_file_extensions_select_the_same_files_in_hf_and_ray(volume, tmp_path):
    volume.files("d", 6)
    volume.write("d/class0/notes.TXT", "x")
    volume.write("d/class1/more.txt", "y")
    hf = open_hf(volume.path("d"), file_extensions=["txt"], cache_dir=str(tmp_path / "hf"))
    ray_source = open_ray(volume.path("d"), file_extensions=[".TXT"])
    expected = [volume.path("d/class0/notes.TXT"), volume.path("d/class1/more.txt")]
    assert sorted(r["path"] for r in hf) == expected
    assert [ray_source._source.manifest.volume_path(i) for i in range(2)] == expected


def test_a_source_travels_small_and_finds_its_listing_in_the_node_cache(volume):
    volume.files("d", 300)
    source = resolve_source(volume.path("d"))
    blob = pickle.dumps(source)
    assert len(blob) < 2_000
    assert os.listdir(os.path.join(os.environ["AIR_CACHE_DIR"], "manifests")) == [f"{source.fingerprint}.listing"]
    air_core.source._memo.clear()  # as in a spawned worker
    clone = pickle.loads(blob)
    assert clone.mode == "files" and clone.manifest == source.manifest


def test_a_source_without_its_listing_file_lists_again_and_insists_on_the_same_files(volume):
    volume.files("d", 5)
    blob = pickle.dumps(resolve_source(volume.path("d"), include="*.bin"))
    for f in os.scandir(os.path.join(os.environ["AIR_CACHE_DIR"], "manifests")):
        os.unlink(f.path)  # as on another machine
    air_core.source._memo.clear()
    assert len(pickle.loads(blob).manifest) == 5
    air_core.source._memo.clear()
    volume.write("d/class0/new.bin", b"new")
    with pytest.raises(ManifestMismatchError, match="changed since it was listed"):
        pickle.loads(blob).manifest


def test_parquet_sources_read_their_footers_once_per_process(volume, monkeypatch):
    write_parquet(volume, "t/a.parquet", range(5))
    write_parquet(volume, "t/b.parquet", range(5, 9))
    source = resolve_source(volume.path("t"))
    assert source.mode == "parquet" and sum(u.num_rows for u in source.reader.units()) == 9
    monkeypatch.setattr(air_core.read.parquet_io, "parquet_units", lambda *a, **k: pytest.fail("footers read again"))
    assert source.reader.schema().names == ["id", "x"] and len(source.reader.units()) == 2


def test_parquet_without_rows_and_unreadable_parquet_are_refused_when_resolving(volume):
    volume.local("none").mkdir()
    pq.write_table(pa.table({"id": pa.array([], pa.int64())}), volume.local("none/a.parquet"))
    with pytest.raises(EmptyVolumeError, match="holds Parquet files but no rows"):
        resolve_source(volume.path("none"))
    volume.write("bad/a.parquet", b"not parquet")
    with pytest.raises(ParquetError, match="a.parquet is not a readable Parquet file"):
        resolve_source(volume.path("bad"))


def test_an_export_destination_reads_as_its_current_export_through_every_front_door(volume, tmp_path):
    from deltalake import write_deltalake

    from air_core import export_delta

    table = volume.local("tables/t")
    write_deltalake(str(table), pa.table({"id": list(range(10))}))
    dest = volume.path("exports/t")
    first = export_delta(volume.path("tables/t"), dest)
    write_deltalake(str(table), pa.table({"id": list(range(10, 15))}), mode="append")
    assert sorted(r["id"] for r in open_hf(dest, cache_dir=str(tmp_path / "hf"))) == list(range(10))
    second = export_delta(volume.path("tables/t"), dest)
    assert resolve_source(dest).path == second.path != first.path
    assert sorted(r["id"] for r in open_hf(dest, cache_dir=str(tmp_path / "hf2"))) == list(range(15))
    assert open_ray(dest)._source.path == second.path
    assert {f.path.rsplit("/", 2)[-2] for f in open_stream(dest)} == {second.path.rsplit("/", 1)[1]}


def test_a_plain_delta_table_without_data_dir_is_read_in_place_by_every_front_door(volume, tmp_path):
    from deltalake import write_deltalake

    table = volume.local("tables/plain")
    write_deltalake(str(table), pa.table({"id": list(range(6))}))
    write_deltalake(str(table), pa.table({"id": list(range(6, 9))}), mode="append")
    write_deltalake(str(table), pa.table({"id": list(range(100, 102))}), mode="overwrite")  # files 1-2 removed
    path = volume.path("tables/plain")
    hf = load_dataset("uc-volume", delta_table=path, split="train", streaming=True, cache_dir=str(tmp_path / "hf"))
    assert sorted(r["id"] for r in hf) == [100, 101]  # the table's rows, not every file in its folder
    old = load_dataset("uc-volume", delta_table=path, delta_version=1, split="train", streaming=True,
                       cache_dir=str(tmp_path / "hf1"))
    assert sorted(r["id"] for r in old) == list(range(9))
    source = open_ray(None, delta_table=path)
    assert source._source.mode == "parquet" and len(source._source.manifest) == 1
    assert not os.path.exists(volume.local("exports"))  # nothing was written


def test_a_delta_table_whose_files_are_not_its_rows_needs_data_dir(volume, tmp_path):
    from deltalake import write_deltalake

    write_deltalake(str(volume.local("tables/parts")), pa.table({"id": [1, 2], "split": ["a", "b"]}),
                    partition_by=["split"])
    with pytest.raises(OptionError, match=r"uses partition columns \['split'\].*give data_dir="):
        resolve_source(None, delta_table=volume.path("tables/parts"))
    with pytest.raises(OptionError, match="in place, from a volume"):
        resolve_source(None, delta_table=str(tmp_path / "elsewhere"))
    with pytest.raises(OptionError, match="give a volume folder to read, or delta_table="):
        resolve_source(None)


def test_the_doors_way_in_loads_the_listing_and_the_streams_on_first_use():
    # A Ray task or DataLoader worker imports a door's reading half, which imports air_core.doors: it must not
    # load what only a driver's planning needs (nor pyarrow or deltalake, which some of that loads).
    code = ("import sys\n"
            "sys.modules['pyarrow'] = sys.modules['deltalake'] = None  # importing them fails\n"
            "import air_core, air_core.doors\n"
            "loaded = {'air_core.source', 'air_core.stream', 'air_core.io.listing', 'air_core.mixed_source'}\n"
            "assert not loaded & set(sys.modules), loaded & set(sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_auto_mode_knows_every_format_by_the_endings_its_reader_reads():
    from air_core.read import FORMATS, auto_suffixes, reader_class

    for mode in FORMATS:
        assert auto_suffixes(mode) == (reader_class(mode).suffixes(given=False) or ()), mode


def test_auto_mode_loads_only_the_reader_of_the_format_it_finds(volume):
    # Every process that resolves a source tells its format from the file names; loading every reader for
    # that cost each one the imports of all the formats (tens of ms where no bytecode is cached).
    volume.files("imgs", 4)
    volume.write("rows/a.jsonl", b'{"x": 1}\n')
    code = ("import json, sys\n"
            "from air_core import resolve_source\n"
            "assert resolve_source(sys.argv[1]).mode == sys.argv[2]\n"
            "print(json.dumps([m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('air_core.read.')]))\n")
    for folder, mode, loaded in (("imgs", "files", {"files", "reader"}), ("rows", "json", {"jsonl", "lines"})):
        proc = subprocess.run([sys.executable, "-c", code, volume.path(folder), mode], capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stderr
        modules = set(json.loads(proc.stdout))
        assert loaded <= modules and not modules & {"webdataset", "delimited", "pack", "parquet"} - loaded, modules


def test_every_name_the_core_exports_to_users_and_to_the_doors_resolves():
    import air_core.doors

    for module in (air_core, air_core.doors):
        missing = [name for name in module.__all__ if getattr(module, name, None) is None]
        assert not missing, (module.__name__, missing)
    assert air_core.doors.resolve_source is air_core.resolve_source is air_core.source.resolve_source
