"""Volumes over the Databricks Files API: the test server, transport selection, files mode, Parquet, failures."""

from __future__ import annotations

import io
import os
import shutil
import time
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("databricks.sdk")

import air_core  # noqa: E402
from air_core.errors import AuthError, FetchError, OptionError, VolumePathError  # noqa: E402
from air_core.io import transport  # noqa: E402
from air_core.io.cache import Cache  # noqa: E402
from databricks.sdk import WorkspaceClient  # noqa: E402


def _data_requests(server) -> list:
    return server.requests("GET", "files")


# --- the server, driven by databricks-sdk's own client ------------------------------------------------


def test_server_speaks_the_sdk_files_api(files_api):
    v, s = files_api, files_api.server
    data = os.urandom(300_000)
    v.write("d/a.bin", data)
    v.write("d/sub/b.txt", "hi")
    w = WorkspaceClient(host=s.host, token=s.token)
    entries = {e.name: e for e in w.files.list_directory_contents(v.path("d"))}
    assert entries["a.bin"].file_size == 300_000 and not entries["a.bin"].is_directory
    assert entries["sub"].is_directory and entries["a.bin"].last_modified > 0
    assert w.files.get_metadata(v.path("d/a.bin")).content_length == 300_000
    assert w.files.download(v.path("d/a.bin")).contents.read() == data
    w.files.upload(v.path("d/new/c.bin"), io.BytesIO(b"x" * 10), overwrite=True)
    assert v.local("d/new/c.bin").read_bytes() == b"x" * 10
    w.files.delete(v.path("d/new/c.bin"))
    assert not v.local("d/new/c.bin").exists()
    with pytest.raises(Exception, match="Not Found|does not exist"):
        w.files.get_metadata(v.path("d/nope"))
    with pytest.raises(Exception, match="Forbidden|invalid access token"):
        WorkspaceClient(host=s.host, token="wrong").files.get_metadata(v.path("d/a.bin"))


def test_server_pages_ranges_and_faults(files_api):
    v, s = files_api, files_api.server
    for i in range(25):
        v.write(f"p/f{i:02d}", b"z")
    s.page_size = 10
    w = WorkspaceClient(host=s.host, token=s.token)
    assert len(list(w.files.list_directory_contents(v.path("p")))) == 25
    assert len(s.requests("GET", "directories")) == 3
    v.write("r.bin", bytes(range(256)) * 4)
    out = w.api_client.do("GET", f"/api/2.0/fs/files{v.path('r.bin')}", headers={"Range": "bytes=10-19"},
                          raw=True)
    assert out["contents"].read() == (bytes(range(256)) * 4)[10:20]
    assert s.requests("GET", "files")[-1].range == "bytes=10-19" and s.requests("GET", "files")[-1].sent == 10
    s.faults.count, s.faults.status = 1, 429
    s.clear_trace()
    w.files.get_metadata(v.path("r.bin"))  # the SDK retries a 429 itself
    assert [r.status for r in s.trace] == [429, 200]


# --- choosing the transport ----------------------------------------------------------------------------


def test_choose_transport():
    never = lambda: pytest.fail("credentials looked up")  # noqa: E731
    assert transport.choose("files-api", True, never) == "files-api"
    assert transport.choose("fuse", False, never) == "fuse"
    assert transport.choose(None, True, never) == "fuse"
    assert transport.choose(None, False, lambda: True) == "files-api"
    assert transport.choose(None, False, lambda: False) == "fuse"
    with pytest.raises(OptionError, match="AIR_VOLUMES_TRANSPORT='ftp': give one of fuse, files-api"):
        transport.choose("ftp", False, never)


def test_auto_selects_files_api_with_credentials_and_no_mount(files_api, monkeypatch):
    monkeypatch.delenv("AIR_VOLUMES_TRANSPORT")
    monkeypatch.setattr(transport, "FUSE_ROOT", str(files_api.root / "not-mounted"))
    files_api.write("d/a.bin", b"abc")
    assert [f.read_bytes() for f in air_core.FileStream(files_api.path("d"))] == [b"abc"]
    monkeypatch.setenv("AIR_VOLUMES_ROOT", str(files_api.root))  # a local folder stands for /Volumes: FUSE
    assert transport.remote(files_api.path("d")) is None


def _mount_without_the_volume(files_api, monkeypatch, tmp_path, root: str):
    """A folder standing for /Volumes (the mount itself, or AIR_VOLUMES_ROOT's) that holds the volume
    /Volumes/main/ml/here but not the Files API's; transport chosen per volume."""
    monkeypatch.delenv("AIR_VOLUMES_TRANSPORT")
    mount = tmp_path / "mount"
    (mount / "main/ml/here/d").mkdir(parents=True)
    (mount / "main/ml/here/d/m.bin").write_bytes(b"mounted")
    if root == "mount":
        monkeypatch.setattr(transport, "FUSE_ROOT", str(mount))
    else:
        monkeypatch.setenv("AIR_VOLUMES_ROOT", str(mount))
    return mount


@pytest.mark.parametrize("root", ["mount", "AIR_VOLUMES_ROOT"])
def test_a_volume_not_on_the_mount_is_read_over_the_files_api(files_api, monkeypatch, tmp_path, root):
    v, s = files_api, files_api.server
    _mount_without_the_volume(v, monkeypatch, tmp_path, root)
    v.write("d/a.bin", b"abc")
    table = pa.table({"id": list(range(1000)), "x": [float(i) for i in range(1000)]})
    v.local("t").mkdir()
    pq.write_table(table, v.local("t/part.parquet"), row_group_size=250)
    assert [f.read_bytes() for f in air_core.FileStream(v.path("d"))] == [b"abc"]
    assert sorted(r["id"] for r in air_core.RowStream(v.path("t"))) == list(range(1000))
    assert {r.path.rsplit("/", 1)[1] for r in _data_requests(s)} == {"a.bin", "part.parquet"}
    s.clear_trace()
    # The volume on the mount, in the same process: read from it, no request
    assert [f.read_bytes() for f in air_core.FileStream("/Volumes/main/ml/here/d")] == [b"mounted"]
    assert s.trace == []


def test_a_pack_from_a_volume_on_the_mount_onto_one_off_it(files_api, monkeypatch, tmp_path):
    v, s = files_api, files_api.server
    source = _mount_without_the_volume(v, monkeypatch, tmp_path, "mount") / "main/ml/here/d"
    for i in range(20):
        (source / f"f{i:02d}.bin").write_bytes(os.urandom(1000 + i))
    r = air_core.pack("/Volumes/main/ml/here/d", v.path("packed"), shard_size=8000, row_group_size=4000)
    assert r.files == 21 and len(r.shards) > 1
    # The files read from the mount, the pack written (and its offsets read back) over the Files API
    assert {q.path[:len(v.path("packed"))] for q in s.trace if q.path.startswith("/Volumes/")} == {v.path("packed")}
    assert {q.path.rsplit("/", 1)[1] for q in s.requests("PUT", "files")} >= set(r.shards)  # the pack written by PUTs
    packed = sorted(f.read_bytes() for f in air_core.FileStream(v.path("packed")))
    assert packed == sorted(p.read_bytes() for p in source.iterdir())


@pytest.mark.parametrize("root", ["mount", "AIR_VOLUMES_ROOT"])
def test_neither_mount_nor_credentials_says_what_was_tried(files_api, monkeypatch, tmp_path, root):
    mount = _mount_without_the_volume(files_api, monkeypatch, tmp_path, root)
    monkeypatch.delenv("DATABRICKS_HOST")
    monkeypatch.delenv("DATABRICKS_TOKEN")
    files_api.write("d/a.bin", b"abc")
    with pytest.raises(VolumePathError, match=rf"the volume /Volumes/main/ml/raw itself is not there \(not at "
                                              rf"{mount}/main/ml/raw on this machine, and no Databricks credentials "
                                              r"were found to read it over the Files API \(databricks-sdk: .+\): "
                                              "set AIR_VOLUMES_ROOT .* or DATABRICKS_HOST and DATABRICKS_TOKEN"):
        air_core.FileStream(files_api.path("d"))


def test_off_the_mount_the_files_api_answer_says_what_was_tried(files_api, monkeypatch, tmp_path):
    v = files_api
    mount = _mount_without_the_volume(v, monkeypatch, tmp_path, "mount")
    v.files("imgs", 2)
    with pytest.raises(VolumePathError, match=rf"the volume /Volumes/main/ml/other itself is not there \(read over "
                                              rf"the Files API of {v.server.host} as it is not at "
                                              rf"{mount}/main/ml/other on this machine\)"):
        air_core.FileStream("/Volumes/main/ml/other/x")
    monkeypatch.setenv("DATABRICKS_TOKEN", "dapi-wrong")
    with pytest.raises(AuthError, match=rf"{v.server.host} refused .*403.*DATABRICKS_TOKEN"):
        air_core.FileStream(v.path("imgs"))


def test_missing_folder_says_what_to_set(files_api, monkeypatch):
    monkeypatch.setenv("AIR_VOLUMES_TRANSPORT", "fuse")
    monkeypatch.setattr(transport, "FUSE_ROOT", str(files_api.root / "not-mounted"))
    with pytest.raises(VolumePathError, match="DATABRICKS_HOST and DATABRICKS_TOKEN"):
        air_core.FileStream("/Volumes/nope/ml/raw/d")


# --- files mode ------------------------------------------------------------------------------------------


def test_files_mode_lists_pages_and_reads_through_the_cache(files_api):
    v, s = files_api, files_api.server
    s.page_size = 7
    paths = v.files("imgs", 40)
    big = os.urandom((40 << 20) + 123)  # over 32 MiB: fetched as 16 MiB ranges at once
    v.write("imgs/big.bin", big)
    stream = air_core.FileStream(v.path("imgs"))
    got = {f.path: f.read_bytes() for f in stream}
    assert sorted(got) == sorted(paths + [v.path("imgs/big.bin")])
    for p in paths:
        assert got[p] == v.local(p[len(v.vol) + 1:]).read_bytes()
    assert got[v.path("imgs/big.bin")] == big
    assert len([r for r in s.requests("GET", "directories") if r.path.endswith("class0")]) == 2  # 14 files: 2 pages
    ranged = [r for r in _data_requests(s) if r.path.endswith("big.bin")]
    assert len(ranged) == 3 and all(r.range for r in ranged) and sum(r.sent for r in ranged) == len(big)
    assert sum(r.sent for r in _data_requests(s)) == sum(len(b) for b in got.values())  # each byte once
    s.clear_trace()
    stream.set_epoch(1)
    assert sum(1 for _ in stream) == 41
    assert s.trace == []  # a second epoch: every file from the node cache, no request


def test_torch_dataset_over_files_api(files_api):
    torch_mod = pytest.importorskip("air_core.torch")
    v, s = files_api, files_api.server
    v.files("imgs", 12)
    ds = torch_mod.UCVolumeDataset(v.path("imgs"))
    first = sorted(open(p, "rb").read() for p in ds)
    assert len(first) == 12
    s.clear_trace()
    assert sorted(open(p, "rb").read() for p in ds) == first
    assert _data_requests(s) == []


def test_verify_records_checksums_over_files_api(files_api):
    v = files_api
    v.files("imgs", 5)
    assert len([f.read_bytes() for f in air_core.FileStream(v.path("imgs"), verify=True)]) == 5
    report = Cache(verify=True).check()
    assert report.entries == 5 and not report.damaged and report.unchecked == 0


# --- Parquet ---------------------------------------------------------------------------------------------


def test_parquet_footers_by_range_and_rows(files_api):
    v, s = files_api, files_api.server
    n = 20_000  # files of ~300 KB: a footer is the last 64 KiB, not the whole file
    for k in range(3):
        table = pa.table({"id": list(range(k * n, (k + 1) * n)), "x": [float(i) for i in range(n)]})
        v.local(f"t/split=s{k}").mkdir(parents=True)
        pq.write_table(table, v.local(f"t/split=s{k}/part.parquet"), row_group_size=5000)
    rows = list(air_core.RowStream(v.path("t")))
    assert sorted(r["id"] for r in rows) == list(range(3 * n))
    assert {r["split"] for r in rows} == {"s0", "s1", "s2"}
    footers = [r for r in _data_requests(s) if not r.range.startswith("bytes=0-")]
    assert len(footers) == 3 and all(r.sent == 64 << 10 for r in footers)  # one request per footer
    size = sum(v.local(f"t/split=s{k}/part.parquet").stat().st_size for k in range(3))
    assert sum(r.sent for r in _data_requests(s) if r.range.startswith("bytes=0-")) == size


# --- failures of a remote service ---------------------------------------------------------------------


def test_429_and_503_bursts_wait_for_retry_after(files_api):
    v, s = files_api, files_api.server
    v.files("imgs", 6)
    # The files' reads, one at a time: the probes of the folder (is it a pack?) run at once.
    s.faults.match, s.faults.count, s.faults.status, s.faults.retry_after = ".bin", 4, 429, 0.2
    begun = time.monotonic()
    assert len(list(air_core.FileStream(v.path("imgs"), fetch_threads=1))) == 6
    assert time.monotonic() - begun >= 4 * 0.2  # each refusal waited at least its Retry-After
    assert [r.status for r in s.trace].count(429) == 4
    s.faults.count, s.faults.status, s.faults.retry_after = 3, 503, None  # no header: backoff
    assert len(list(air_core.FileStream(v.path("imgs"), cache_dir=str(v.root / "c2")))) == 6


def test_requests_in_flight_are_bounded(files_api, monkeypatch):
    from air_core.io import files_api as mod

    v, s = files_api, files_api.server
    v.files("imgs", 40)
    # Read when this test's client is made: the fixture's configuration (its own config file) is this test's.
    monkeypatch.setattr(mod, "MAX_IN_FLIGHT", 4)
    s.faults.latency_s = 0.05
    assert len(list(air_core.FileStream(v.path("imgs"), fetch_threads=32))) == 40
    assert 1 < s.peak_unanswered <= 4


def test_connections_are_reused(files_api):
    v, s = files_api, files_api.server
    v.files("imgs", 60)
    assert len(list(air_core.FileStream(v.path("imgs"), fetch_threads=4))) == 60
    # A connection per thread that ever ran at once (the listing's, the fetches'), not one per request.
    assert len(s.trace) > 60 and s.connections <= 20


def test_the_proxy_the_environment_names_is_used(files_api, monkeypatch):
    v, s = files_api, files_api.server
    v.files("imgs", 3)
    # A host that resolves nowhere: only through the proxy (the server, which answers any host) is it reached.
    monkeypatch.setenv("DATABRICKS_HOST", "http://workspace.invalid")
    monkeypatch.setenv("HTTP_PROXY", s.host)
    monkeypatch.setenv("NO_PROXY", "")
    assert len(list(air_core.FileStream(v.path("imgs")))) == 3


def test_credentials_refused_name_host_and_credential(files_api, monkeypatch):
    v = files_api
    v.files("imgs", 2)
    monkeypatch.setenv("DATABRICKS_TOKEN", "dapi-wrong")
    with pytest.raises(AuthError, match=rf"{v.server.host} refused .*403.*DATABRICKS_TOKEN"):
        air_core.FileStream(v.path("imgs"))


def test_not_found_is_the_fuse_error(files_api):
    v = files_api
    v.files("imgs", 2)
    with pytest.raises(VolumePathError, match=rf"^{v.path('nope')} does not exist"):
        air_core.FileStream(v.path("nope"))
    with pytest.raises(VolumePathError, match="the volume /Volumes/main/ml/other itself is not there"):
        air_core.FileStream("/Volumes/main/ml/other/x")
    with pytest.raises(VolumePathError, match="is a file, but a folder is expected"):
        air_core.FileStream(v.path("imgs/class0/f00000.bin"))


@pytest.mark.parametrize("fault", ["resets", "shorts"])
def test_body_cut_short_resumes_from_last_byte_and_is_never_cached_short(files_api, fault):
    v, s = files_api, files_api.server
    data = os.urandom(200_000)
    v.write("imgs/a.bin", data)
    setattr(s.faults, fault, 2)
    s.faults.reset_after, s.faults.short_by = 50_000, 1
    [f] = air_core.FileStream(v.path("imgs"))
    assert f.read_bytes() == data and os.path.getsize(f.local_path) == len(data)
    gets = _data_requests(s)
    assert len(gets) == 3
    assert gets[0].range == "bytes=0-199999" and gets[1].range == f"bytes={gets[0].sent}-199999"
    assert sum(r.sent for r in gets) == len(data)  # resumed where each stopped: no byte twice


def test_body_short_every_time_is_an_error_and_nothing_cached(files_api):
    v, s = files_api, files_api.server
    v.write("imgs/a.bin", os.urandom(10_000))
    s.faults.shorts = 10**6
    with pytest.raises(FetchError, match="a.bin"):
        list(air_core.FileStream(v.path("imgs")))
    assert Cache().info()["entries"] == 0


def test_file_changed_after_listing(files_api):
    v = files_api
    v.write("imgs/a.bin", b"a" * 100)
    stream = air_core.FileStream(v.path("imgs"))
    v.write("imgs/a.bin", b"b" * 150)
    with pytest.raises(FetchError, match="changed after it was listed"):
        list(stream)


# --- packs -----------------------------------------------------------------------------------------------


def test_a_pack_reads_by_row_group_ranges(files_api, monkeypatch):
    v, s = files_api, files_api.server
    loose = {p: v.local(p[len(v.vol) + 1:]).read_bytes() for p in v.files("d", 60, size=lambda i: 2000 + 50 * i)}
    with monkeypatch.context() as m:  # packed where the folder is mounted
        m.setenv("AIR_VOLUMES_TRANSPORT", "fuse")
        m.setenv("AIR_VOLUMES_ROOT", str(v.root))
        r = air_core.pack(v.path("d"), v.path("packed"), shard_size=60_000, row_group_size=15_000)
    s.clear_trace()
    halves = [air_core.FileStream(v.path("packed"), rank=k, world_size=2) for k in range(2)]
    got = [f.read_bytes() for h in halves for f in h]
    assert sorted(got) == sorted(loose.values())
    data = [q for q in _data_requests(s) if q.path.endswith(".parquet")]
    assert data and all(q.range for q in data)
    shards = sum(v.local(f"{r.path[len(v.vol) + 1:]}/{name}").stat().st_size for name in r.shards)
    assert sum(q.sent for q in data) < shards  # row groups' ranges, not whole shards
    assert sum(q.sent for q in data) >= sum(len(b) for b in loose.values())
    s.clear_trace()
    for h in halves:
        h.set_epoch(1)
        assert sum(1 for _ in h)
    assert _data_requests(s) == []


# --- records -----------------------------------------------------------------------------------------------


def test_json_lines_and_csv_over_files_api(files_api):
    v = files_api
    v.write("j/a.jsonl", "".join(f'{{"id": {i}}}\n' for i in range(500)))
    v.write("j/b.jsonl", "".join(f'{{"id": {i}}}\n' for i in range(500, 800)))
    v.write("c/a.csv", "id,name\n" + "".join(f"{i},n{i}\n" for i in range(300)))
    assert sorted(r["id"] for r in air_core.RowStream(v.path("j"))) == list(range(800))
    assert [r["name"] for r in air_core.RowStream(v.path("c"))][:2] == ["n0", "n1"]


def test_a_bad_record_names_its_file_and_line_over_files_api(files_api):
    from air_core.errors import RecordError

    v = files_api
    v.write("j/a.jsonl", '{"id": 1}\n{"id": 2}\nnot json\n')
    with pytest.raises(RecordError, match=r"a\.jsonl, line 3"):
        list(air_core.RowStream(v.path("j")))


# --- writes --------------------------------------------------------------------------------------------


def test_dcp_checkpoint_over_files_api_is_whole_object_puts_with_metadata_last(files_api):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    from air_core.torch import UCVolumeReader, UCVolumeWriter

    v, s = files_api, files_api.server
    path = v.path("ckpt/latest")
    for value in (1.0, 2.0):
        s.clear_trace()
        dcp.save({"w": torch.full((3,), value)}, storage_writer=UCVolumeWriter(path))
    puts = [r.path.rsplit("/", 1)[1] for r in s.requests("PUT", "files")]
    assert puts[-1] == ".metadata" and "__0_0.distcp" in puts
    assert sorted(os.listdir(v.local("ckpt/latest"))) == [".metadata", "__0_0.distcp"]
    target = {"w": torch.zeros(3)}
    dcp.load(target, storage_reader=UCVolumeReader(path))
    assert target["w"].tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(VolumePathError, match="ckpt/nope does not exist"):
        UCVolumeReader(v.path("ckpt/nope"))
    with pytest.raises(VolumePathError, match=r"ckpt holds no checkpoint \(no \.metadata file\)"):
        UCVolumeReader(v.path("ckpt"))


def test_stage_copies_a_folder_over_files_api(files_api, tmp_path):
    from air_core.io.stage import stage

    v = files_api
    paths = v.files("imgs", 20)
    stage(v.path("imgs"), str(tmp_path / "out"))
    for p in paths:
        rel = p[len(v.path("imgs")) + 1:]
        assert (tmp_path / "out" / rel).read_bytes() == v.local(p[len(v.vol) + 1:]).read_bytes()


# --- fsspec ---------------------------------------------------------------------------------------------


def test_fsspec_uc_protocol_for_pandas_and_pyarrow(files_api):
    fsspec = pytest.importorskip("fsspec")
    pd = pytest.importorskip("pandas")
    import pyarrow.fs as pafs

    import air_core.io.ucfs  # noqa: F401  (registers "uc")

    v, s = files_api, files_api.server
    v.write("t/a.csv", "id,name\n1,a\n2,b\n")
    table = pa.table({"id": list(range(50_000))})
    pq.write_table(table, v.local("t/p.parquet"), row_group_size=10_000)
    fs = fsspec.filesystem("uc")
    assert sorted(fs.ls("uc://main/ml/raw/t", detail=False)) == ["main/ml/raw/t/a.csv", "main/ml/raw/t/p.parquet"]
    assert fs.ls(v.path("t"), detail=False) == fs.ls("main/ml/raw/t", detail=False)  # a volume path names it too
    assert fs.info("uc://main/ml/raw/t")["type"] == "directory"
    assert fs.info(v.path("t/a.csv"))["size"] == len("id,name\n1,a\n2,b\n")
    assert pd.read_csv("uc://main/ml/raw/t/a.csv")["name"].tolist() == ["a", "b"]
    s.clear_trace()
    arrow_fs = pafs.PyFileSystem(pafs.FSSpecHandler(fs))
    md = pq.read_metadata(v.path("t/p.parquet"), filesystem=arrow_fs)
    assert md.num_rows == 50_000 and len(_data_requests(s)) == 1  # the footer: one ranged request
    assert pq.read_table(v.path("t/p.parquet"), filesystem=arrow_fs)["id"].to_pylist() == list(range(50_000))
    with fs.open("uc://main/ml/raw/out/new.bin", "wb") as f:
        f.write(b"x" * 1000)
    assert v.local("out/new.bin").read_bytes() == b"x" * 1000 and [r.path for r in s.requests("PUT")][-1:] == [
        v.path("out/new.bin")]
    fs.rm_file("uc://main/ml/raw/out/new.bin")
    assert not v.local("out/new.bin").exists()
    with pytest.raises(FileNotFoundError):
        fs.info("uc://main/ml/raw/nope")


def test_hf_own_builders_read_uc_urls(files_api, tmp_path):
    """datasets' csv and parquet builders, given uc:// data files, read them through the fsspec protocol."""
    datasets = pytest.importorskip("datasets")
    import air_core.io.ucfs  # noqa: F401  (registers "uc")

    v = files_api
    v.write("t/a.csv", "id,name\n1,a\n2,b\n")
    v.local("p").mkdir(parents=True)
    pq.write_table(pa.table({"id": list(range(2_000))}), v.local("p/x.parquet"), row_group_size=500)
    csv = datasets.load_dataset("csv", data_files="uc://main/ml/raw/t/a.csv", split="train", streaming=True,
                                cache_dir=str(tmp_path / "hf"))
    assert [r["name"] for r in csv] == ["a", "b"]
    table = datasets.load_dataset("parquet", data_files="uc://main/ml/raw/p/*.parquet", split="train",
                                  streaming=True, cache_dir=str(tmp_path / "hf"))
    assert sum(len(b["id"]) for b in table.iter(batch_size=700)) == 2_000


def test_hf_uc_volume_builder_streams_over_files_api(files_api):
    datasets = pytest.importorskip("datasets")
    import air_hf  # noqa: F401

    v = files_api
    paths = v.files("imgs", 9)
    ds = datasets.load_dataset("uc-volume", data_dir=v.path("imgs"), split="train", streaming=True, decode="bytes")
    rows = list(ds)
    assert sorted(r["path"] for r in rows) == paths
    assert all(r["bytes"] == v.local(r["path"][len(v.vol) + 1:]).read_bytes() for r in rows)


def test_pack_publication_over_files_api(files_api):
    v, s = files_api, files_api.server
    loose = sorted(v.local(p[len(v.vol) + 1:]).read_bytes() for p in v.files("d", 40, size=lambda i: 3000 + i))
    r = air_core.pack(v.path("d"), v.path("packed"), shard_size=40_000, row_group_size=10_000)
    assert r.files == 40 and len(r.shards) >= 3 and not r.skipped
    puts = [q.path.rsplit("/", 1)[1] for q in s.requests("PUT", "files")]
    assert puts[-1] == "_air_pack.json" and puts[-2] != "_air_pack.json"  # the pointer last, once
    assert not [q for q in s.trace if q.path.endswith(".part")]  # whole-object PUTs: no hidden copies
    assert sorted(f.read_bytes() for f in air_core.FileStream(v.path("packed"))) == loose
    again = air_core.pack(v.path("d"), v.path("packed"), shard_size=40_000, row_group_size=10_000)
    assert again.skipped and again.path == r.path
    v.write("d/class0/new.bin", b"n" * 500)  # a changed source: a new generation, the old one retired
    third = air_core.pack(v.path("d"), v.path("packed"), shard_size=40_000, row_group_size=10_000)
    assert third.path != r.path and len(list(air_core.FileStream(v.path("packed")))) == 41


def test_files_api_forced_without_credentials_says_what_to_set(files_api, monkeypatch):
    monkeypatch.delenv("DATABRICKS_HOST")
    monkeypatch.delenv("DATABRICKS_TOKEN")
    with pytest.raises(OptionError, match="AIR_VOLUMES_TRANSPORT=files-api.*set DATABRICKS_HOST and DATABRICKS_TOKEN"):
        air_core.FileStream(files_api.path("d"))



# --- a full cache, and one key per file -------------------------------------------------------------------


FULL = 0  # a cache_limit= that admits nothing: a cache that holds its limit


@pytest.fixture
def full_cache(monkeypatch):
    """Node caches that admit nothing more, as on a full disk: also where no cache_limit= reaches (a pack's
    index and offsets, a checkpoint's files)."""
    total = shutil.disk_usage("/").total
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=total, used=total, free=0))


def test_a_pack_past_a_full_cache_streams_its_index_and_offsets(files_api, monkeypatch, request):
    v = files_api
    loose = sorted(v.local(p[len(v.vol) + 1:]).read_bytes() for p in v.files("d", 30, size=lambda i: 1000 + i))
    with monkeypatch.context() as m:
        m.setenv("AIR_VOLUMES_TRANSPORT", "fuse")
        m.setenv("AIR_VOLUMES_ROOT", str(v.root))
        air_core.pack(v.path("d"), v.path("packed"), shard_size=20_000, row_group_size=5_000)
    request.getfixturevalue("full_cache")
    assert sorted(f.read_bytes() for f in air_core.FileStream(v.path("packed"))) == loose


def test_a_checkpoint_past_a_full_cache_is_read_from_the_api(files_api, request):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    from air_core.torch import UCVolumeReader, UCVolumeWriter

    path = files_api.path("ckpt/latest")
    dcp.save({"w": torch.arange(5.0)}, storage_writer=UCVolumeWriter(path))
    request.getfixturevalue("full_cache")
    files_api.server.clear_trace()
    target = {"w": torch.zeros(5)}
    dcp.load(target, storage_reader=UCVolumeReader(path))
    assert target["w"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert {r.path.rsplit("/", 1)[1] for r in _data_requests(files_api.server)} == {".metadata", "__0_0.distcp"}


def test_files_past_a_full_cache_come_in_memory_with_no_local_path(files_api):
    torch_mod = pytest.importorskip("air_core.torch")
    v = files_api
    want = sorted(v.local(p[len(v.vol) + 1:]).read_bytes() for p in v.files("imgs", 8))
    files = list(air_core.FileStream(v.path("imgs"), cache_limit=FULL))
    assert all(not f.cached and f.local_path == "" for f in files)  # the volume path is no local file here
    assert sorted(f.read_bytes() for f in files) == want
    items = list(torch_mod.UCVolumeDataset(v.path("imgs"), cache_limit=FULL))  # in memory, named for their paths
    assert sorted(item.read() for item in items) == want
    assert sorted(item.name for item in items) == sorted(f.path for f in files)


def test_one_key_per_file_whether_listed_or_stat_ed(files_api):
    v = files_api
    v.write("d/a.bin", b"a" * 1000)
    os.utime(v.local("d/a.bin"), ns=(1_700_000_000_123_456_789,) * 2)  # milliseconds a listing has, HEAD not
    [(_, size, listed)], _ = transport.entries(v.path("d"))
    assert transport.stat(v.path("d/a.bin")) == (size, listed) == (1000, 1_700_000_000 * 10**9)
    [f] = air_core.FileStream(v.path("d"))  # keyed by the listing ...
    assert Cache().lookup(f.path, *transport.stat(v.path("d/a.bin"))) == f.local_path  # ... found by HEAD


def _parquet_tree(v, files: int = 4, rows: int = 40_000, row_group_size: int = 5_000) -> int:
    """`files` Parquet files of `rows` rows under t/, ids 0.. in order; returns their bytes in all."""
    for k in range(files):
        ids = list(range(k * rows, (k + 1) * rows))
        table = pa.table({"id": ids, "x": [float(i) for i in ids], "s": [f"row {i}" * 3 for i in ids]})
        v.local("t").mkdir(exist_ok=True)
        pq.write_table(table, v.local(f"t/p{k}.parquet"), row_group_size=row_group_size)
    return sum(v.local(f"t/p{k}.parquet").stat().st_size for k in range(files))


def test_parquet_ranks_request_only_their_row_groups(files_api):
    v, s = files_api, files_api.server
    total = _parquet_tree(v, files=3)  # 3 files, 2 ranks: the ranks split p1's row groups
    s.clear_trace()
    streams = [air_core.RowStream(v.path("t"), rank=k, world_size=2) for k in range(2)]
    ids = sorted(r["id"] for st in streams for r in st)
    assert ids == list(range(120_000))
    sent = sum(r.sent for r in _data_requests(s))  # planning included: a footer is read as the last 64 KiB
    assert sent <= 1.05 * (total + 3 * (64 << 10))  # across ranks, about each byte once (p1 whole twice: 1.3x)
    split = [r for r in _data_requests(s) if r.path.endswith("p1.parquet")]
    assert len(split) > 2 and not any(r.range.startswith("bytes=0-") for r in split)  # its row groups' ranges
    tails = [r.path for r in _data_requests(s) if r.sent == 64 << 10]
    assert sorted(tails) == [v.path(f"t/p{k}.parquet") for k in range(3)]  # a footer once a node, planning and read
    s.clear_trace()
    for st in streams:
        st.set_epoch(1)
        assert sum(1 for _ in st) == 60_000
    assert s.trace == []  # a second epoch: every range from the node cache


def test_parquet_ranges_past_a_full_cache(files_api):
    v, s = files_api, files_api.server
    total = _parquet_tree(v, files=3)
    streams = [air_core.RowStream(v.path("t"), rank=k, world_size=2, cache_limit=FULL) for k in range(2)]
    s.clear_trace()
    assert sorted(r["id"] for st in streams for r in st) == list(range(120_000))
    # Each rank its own ranges, in memory: the tail and the row group the ranks split are fetched twice.
    assert sum(r.sent for r in _data_requests(s)) <= 1.1 * total


# --- Ray -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ray_reads_over_files_api_with_credentials_in_the_runtime_env(files_api, ray_cluster):
    import hashlib
    import json
    import subprocess
    import sys
    from pathlib import Path

    v, s = files_api, files_api.server
    paths = v.files("imgs", 12)
    _parquet_tree(v, files=2, rows=4_000, row_group_size=1_000)
    env = {k: val for k, val in os.environ.items() if k != "AIR_VOLUMES_ROOT"}
    env["RAY_ADDRESS"] = ray_cluster.get_runtime_context().gcs_address
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "scripts" / "ray_files_api.py"), v.path("imgs"),
                           v.path("t")], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    want = {p: hashlib.sha256(v.local(p[len(v.vol) + 1:]).read_bytes()).hexdigest() for p in paths}
    assert out["files"] == [want, want]
    assert out["parquet"] == [list(range(8_000))] * 2
    assert not out["token_pickled"]
    served = {r.path for r in _data_requests(s)}
    assert set(paths) <= served and v.path("t/p0.parquet") in served  # the workers read through the server
    assert len([r for r in _data_requests(s) if r.path in paths]) == len(paths)  # once: the second from the cache
