"""air_ray: the Ray Data front door, on the session's local Ray cluster."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")
from ray import cloudpickle  # noqa: E402
from ray.data import DataContext, FileShuffleConfig  # noqa: E402

from air_core.errors import EmptyVolumeError, OptionError, VolumePathError  # noqa: E402
from air_core.read.parquet_io import ParquetError  # noqa: E402
import air_core.source  # noqa: E402
import air_ray  # noqa: E402
from air_ray import UCVolumeDatasource, placement, read_uc_volume, task_plan  # noqa: E402
from conftest import ROOT, torchrun  # noqa: E402

SCRIPTS = Path(__file__).parent / "scripts"


def write_table(volume, folder: str, *, files_per_split: int = 2, rows: int = 50, row_group: int = 20) -> list[dict]:
    """A hive-partitioned Parquet tree (split=train/test); returns every row, `id` unique."""
    out, next_id = [], 0
    for split in ("train", "test"):
        for k in range(files_per_split):
            ids = list(range(next_id, next_id + rows))
            next_id += rows
            t = pa.table({"id": ids, "text": [f"row {i}" for i in ids]})
            p = volume.local(f"{folder}/split={split}/part-{k}.parquet")
            p.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(t, p, row_group_size=row_group)
            out += [{"id": i, "text": f"row {i}", "split": split} for i in ids]
    return out


@pytest.fixture
def ordered():
    """Datasets made inside keep their rows in task order."""
    opts = DataContext.get_current().execution_options
    saved, opts.preserve_order = opts.preserve_order, True
    yield
    opts.preserve_order = saved


# -- files mode --------------------------------------------------------------------------------


@pytest.mark.slow
def test_file_rows_come_with_bytes_and_a_second_execution_needs_no_volume(volume, ray_cluster):
    paths = volume.files("d", 30)
    cache = str(volume.root.parent / "given-cache")  # the session's workers keep their own AIR_CACHE_DIR
    ds = read_uc_volume(volume.path("d"), include_bytes=True, cache_dir=cache)
    assert ds.count() == 30  # from the read tasks' metadata, before any read
    assert ds.schema().names == ["path", "local_path", "size", "bytes"]
    assert ds.schema().base_schema.field("bytes").type == pa.binary()
    rows = ds.take_all()
    assert sorted(r["path"] for r in rows) == paths
    for r in rows:
        data = volume.local(r["path"][len(volume.vol) + 1:]).read_bytes()
        assert r["bytes"] == data and r["size"] == len(data)
        assert r["local_path"].startswith(cache) and Path(r["local_path"]).read_bytes() == data
    for p in paths:  # the volume is gone: a second execution must be served by the cache alone
        volume.local(p[len(volume.vol) + 1:]).unlink()
    again = {r["path"]: r["bytes"] for r in ds.take_all()}
    assert again == {r["path"]: r["bytes"] for r in rows}


def test_bytes_stay_binary_unless_a_file_needs_large_binary(volume):
    volume.files("d", 3)
    with open(volume.local("d/huge.bin"), "wb") as f:  # sparse: 1.5 GiB listed, nothing on disk
        f.truncate(3 << 29)
    source = UCVolumeDatasource(volume.path("d"), include_bytes=True)
    assert source.schema().field("bytes").type == pa.large_binary()
    assert all(t.schema.field("bytes").type == pa.large_binary() for t in source.get_read_tasks(2))
    small = UCVolumeDatasource(volume.path("d"), include_bytes=True, exclude="huge.bin")
    assert small.schema().field("bytes").type == pa.binary()


def test_binary_blocks_close_before_2_gib():
    assert task_plan.binary_block_bytes(128 << 20, 5 << 20) == 128 << 20
    # A block closes once it holds the limit; with its last file it still fits 32-bit offsets.
    limit = task_plan.binary_block_bytes(4 << 30, 1 << 30)
    assert limit == 1 << 30 and limit + (1 << 30) - 1 <= 2**31 - 1
    assert task_plan.binary_block_bytes(4 << 30, 5 << 20) == (2 << 30) - (5 << 20)


def test_read_tasks_are_byte_balanced_deterministic_and_carry_only_their_rows(volume):
    volume.files("d", 300, size=lambda i: 50 + (i * 7919) % 5000)
    source = UCVolumeDatasource(volume.path("d"), include_paths=True)
    tasks = source.get_read_tasks(4)
    assert len(tasks) == 4
    assert [t.metadata.input_files for t in tasks] == [t.metadata.input_files for t in source.get_read_tasks(4)]
    sizes = {p: volume.local(p[len(volume.vol) + 1:]).stat().st_size
             for t in tasks for p in t.metadata.input_files}
    loads = [sum(sizes[p] for p in t.metadata.input_files) for t in tasks]
    assert max(loads) - min(loads) <= max(sizes.values())
    assert sum(t.metadata.num_rows for t in tasks) == 300 and len(sizes) == 300
    assert all(isinstance(t.metadata.size_bytes, int) for t in tasks)
    whole = len(cloudpickle.dumps(source.get_read_tasks(1)[0].read_fn))  # one task: every row
    for t in tasks:
        assert t.read_fn.__name__ == "read_uc_volume_files"
        assert len(cloudpickle.dumps(t.read_fn)) < whole / 2
    # The read functions run anywhere: here, without Ray.
    got = [p for t in tasks for block in t() for p in block.column("path").to_pylist()]
    assert sorted(got) == sorted(sizes)


def test_task_count_and_groups_are_pure_and_bounded():
    assert task_plan.task_count(0, 8) == 0
    assert task_plan.task_count(3, 8) == 3
    assert task_plan.task_count(2000, 200, min_per_task=64) == 31
    assert task_plan.task_count(10, 200, min_per_task=64) == 1
    groups = task_plan.groups([5, 1, 9, 3, 7, 2], 3)
    assert sorted(p for g in groups for p in g) == list(range(6))
    assert all(g == sorted(g) for g in groups) and len(groups) == 3
    assert task_plan.groups([4], 3) == [[0]]


@pytest.mark.slow
@pytest.mark.parametrize("equalize", ["none", "drop", "pad"])
def test_ranks_read_disjoint_slices_that_cover_the_folder(volume, ray_cluster, equalize):
    paths = volume.files("d", 31)
    got = [[r["path"] for r in read_uc_volume(volume.path("d"), rank=r, world_size=3, equalize=equalize).take_all()]
           for r in range(3)]
    counts = [len(g) for g in got]
    if equalize == "none":
        assert sorted(p for g in got for p in g) == paths and max(counts) - min(counts) <= 1
    elif equalize == "drop":
        assert counts == [10, 10, 10] and len({p for g in got for p in g}) == 30
    else:
        assert counts == [11, 11, 11] and {p for g in got for p in g} == set(paths)
        assert sum(len(set(g)) for g in got) == 31  # a short rank repeats its own files


@pytest.mark.slow
def test_shuffle_follows_rays_file_shuffle_config(volume, ray_cluster, ordered):
    volume.files("d", 40)
    fresh = read_uc_volume(volume.path("d"), shuffle=FileShuffleConfig(seed=1))
    fixed = read_uc_volume(volume.path("d"), shuffle=FileShuffleConfig(seed=1, reseed_after_execution=False))
    plain = read_uc_volume(volume.path("d"))
    a, b = ([r["path"] for r in fresh.take_all()] for _ in range(2))
    assert a != b and sorted(a) == sorted(b)
    assert [r["path"] for r in fixed.take_all()] == [r["path"] for r in fixed.take_all()]
    assert [r["path"] for r in plain.take_all()] == [r["path"] for r in plain.take_all()]


@pytest.mark.slow
def test_the_listing_travels_as_a_file_not_inside_the_datasource(volume, ray_cluster):
    volume.files("d", 300)
    source = UCVolumeDatasource(volume.path("d"))
    pickled = cloudpickle.dumps(source)
    assert len(pickled) < len(cloudpickle.dumps(source._source.manifest)) / 4
    air_core.source._memo.clear()  # as in a process that never saw the listing
    copy = cloudpickle.loads(pickled)
    assert sum(t.metadata.num_rows for t in copy.get_read_tasks(2)) == 300


# -- Parquet mode ------------------------------------------------------------------------------


@pytest.mark.slow
def test_parquet_rows_keep_partition_columns_and_counts_are_exact(volume, ray_cluster):
    expected = write_table(volume, "t")
    ds = read_uc_volume(volume.path("t"))
    assert ds.count() == len(expected)
    assert ds.schema().names == ["id", "text", "split"]
    assert sorted(ds.take_all(), key=lambda r: r["id"]) == expected
    picked = ds.select_columns(["split", "id"]).take(3)
    assert all(list(r) == ["split", "id"] for r in picked)
    projected = read_uc_volume(volume.path("t"), columns=["split", "id"])
    assert projected.schema().names == ["split", "id"]
    assert sorted((r["id"], r["split"]) for r in projected.take_all()) == [(r["id"], r["split"]) for r in expected]
    with_paths = read_uc_volume(volume.path("t"), include_paths=True).take(1)[0]
    assert with_paths["path"].startswith(volume.path("t/split="))


@pytest.mark.slow
def test_parquet_ranks_get_exactly_equal_rows(volume, ray_cluster):
    expected = write_table(volume, "t", rows=53)  # 212 rows: 53 per rank of 4
    shares = [read_uc_volume(volume.path("t"), rank=r, world_size=4, equalize="drop") for r in range(4)]
    assert [s.count() for s in shares] == [53] * 4
    ids = [r["id"] for s in shares for r in s.take_all()]
    assert sorted(ids) == sorted(r["id"] for r in expected)
    uneven = [read_uc_volume(volume.path("t"), rank=r, world_size=3).count() for r in range(3)]
    assert sum(uneven) == 212 and max(uneven) - min(uneven) <= 1


# -- bad input: clear errors, on the driver ----------------------------------------------------


def _mixed(volume):
    volume.write("m/a.parquet", b"")
    volume.write("m/b.txt", "x")
    return volume.path("m"), {}


def _corrupt(volume):
    write_table(volume, "t")
    volume.write("t/split=train/part-9.parquet", b"not parquet at all")
    return volume.path("t"), {}


def _two_schemas(volume):
    write_table(volume, "t")
    pq.write_table(pa.table({"id": ["nine"]}), volume.local("t/split=train/part-9.parquet"))
    return volume.path("t"), {}


@pytest.mark.parametrize("case, error, words", [
    (lambda v: (v.path("missing"), {}), VolumePathError, "does not exist"),
    (lambda v: ("/tmp/not/a/volume", {}), VolumePathError, "/Volumes/<catalog>"),
    (lambda v: (v.local("empty").mkdir() or v.path("empty"), {}), EmptyVolumeError, "holds no file"),
    (lambda v: (v.files("d", 2) and v.path("d"), {"include_byte": True}), OptionError, "include_bytes"),
    (lambda v: (v.files("d", 2) and v.path("d"), {"override_num_block": 2}), OptionError, "override_num_blocks"),
    (lambda v: (v.files("d", 2) and v.path("d"), {"file_extensions": ["jpg"]}), EmptyVolumeError, "file_extensions"),
    (lambda v: (v.files("d", 2) and v.path("d"), {"shuffle": True}), OptionError, "FileShuffleConfig"),
    (lambda v: (v.files("d", 2) and v.path("d"), {"mode": "images"}), OptionError, "mode="),
    (lambda v: (v.files("d", 2) and v.path("d"), {"rank": 2, "world_size": 2}), OptionError, "rank=2"),
    (lambda v: (v.files("d", 2) and v.path("d"), {"rank": 2, "world_size": 3}), OptionError, "equalize='pad'"),
    (lambda v: (v.files("d", 2) and v.path("d"), {"mode": "parquet"}), OptionError, "file_extensions"),
    (_mixed, OptionError, "mixes Parquet files"),
    (_corrupt, ParquetError, "part-9.parquet is not a readable Parquet file"),
    (_two_schemas, ParquetError, "part-9.parquet and"),
    (lambda v: (write_table(v, "t") and v.path("t"), {"columns": ["id", "nope"]}), OptionError,
     "the rows' columns, ['id', 'text', 'split']"),
], ids=["missing", "not-a-volume", "empty", "unknown-option", "unknown-ray-option", "no-extension-match",
        "bad-shuffle", "bad-mode", "rank-out-of-range", "rank-without-files", "parquet-mode-on-files",
        "mixed-tree", "corrupt-parquet", "two-schemas", "unknown-column"])
def test_bad_input_fails_clearly_on_the_driver(volume, case, error, words):
    path, options = case(volume)
    with pytest.raises(error, match=None) as e:
        read_uc_volume(path, **options)
    assert words in str(e.value)


# -- engines: Ray Train, torchrun, netvol, Delta --------------------------------------------------


@pytest.mark.slow
def test_ray_train_workers_get_disjoint_complete_shards(volume, ray_cluster, tmp_path):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    paths = volume.files("d", 40)
    out = tmp_path / "out"
    out.mkdir()

    def train_fn(config):
        shard = ray.train.get_dataset_shard("train")  # streaming_split(2, equal=True) under the hood
        got = [row["path"] for row in shard.iter_rows()]
        with open(f"{config['out']}/rank{ray.train.get_context().get_world_rank()}.json", "w") as f:
            json.dump(got, f)

    TorchTrainer(
        train_fn, train_loop_config={"out": str(out)}, datasets={"train": read_uc_volume(volume.path("d"))},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(storage_path=str(tmp_path / "train"), name="shards"),
    ).fit()
    a, b = (json.loads((out / f"rank{r}.json").read_text()) for r in range(2))
    assert len(a) == len(b) == 20 and not set(a) & set(b) and sorted(a + b) == paths


@pytest.mark.slow
def test_torchrun_ranks_detect_their_slice(volume, ray_cluster, tmp_path):
    paths = volume.files("d", 41)
    torchrun(SCRIPTS / "ray_torchrun.py", 2, volume.path("d"), str(tmp_path),
             env={"RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address})
    a, b = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert a["count"] == b["count"] == 20 == len(a["paths"]) == len(b["paths"])
    assert not set(a["paths"]) & set(b["paths"]) and set(a["paths"]) | set(b["paths"]) < set(paths)


@pytest.mark.slow
def test_netvol_trace_first_execution_opens_each_file_once_second_none(volume, netvol_so, tmp_path):
    paths = volume.files("d", 60)
    parquet = sorted(f"{volume.local_vol}/t/{p}" for p in ("split=train/part-0.parquet", "split=train/part-1.parquet",
                                                            "split=test/part-0.parquet", "split=test/part-1.parquet"))
    rows = write_table(volume, "t")
    trace = tmp_path / "trace"
    trace.touch()
    env = {**os.environ, "LD_PRELOAD": netvol_so, "NETVOL_PREFIX": f"{volume.root}/", "NETVOL_OPEN_MS": "2",
           "NETVOL_MBPS": "0", "NETVOL_TRACE": str(trace),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(SCRIPTS / "ray_netvol.py"), volume.path("d"), volume.path("t"),
                           str(trace)], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    local = [f"{volume.local_vol}/{p[len(volume.vol) + 1:]}" for p in paths]
    assert Counter(out["files"]["first"]) == Counter(local)
    assert out["files"]["second"] == []
    want = {p: hashlib.sha256(Path(q).read_bytes()).hexdigest() for p, q in zip(paths, local)}
    assert out["digests"]["first"] == out["digests"]["second"] == want
    assert Counter(out["parquet"]["first"]) == Counter(parquet)
    assert out["parquet"]["second"] == []
    assert out["parquet_rows"] == [len(rows)] * 2


@pytest.mark.slow
def test_delta_table_is_exported_then_read_as_parquet(volume, ray_cluster):
    deltalake = pytest.importorskip("deltalake")
    pytest.importorskip("air_core.delta")
    table = volume.local("tables/events")
    data = pa.table({"id": list(range(90)), "split": [("train", "test")[i % 2] for i in range(90)]})
    deltalake.write_deltalake(str(table), data, partition_by=["split"])
    deltalake.DeltaTable(str(table)).delete("id < 10")
    ds = read_uc_volume(volume.path("exports/events"), delta_table=volume.path("tables/events"))
    assert ds.count() == 80
    assert sorted((r["id"], r["split"]) for r in ds.take_all()) == \
        [(i, ("train", "test")[i % 2]) for i in range(10, 90)]
    with pytest.raises(OptionError, match="delta_table="):
        read_uc_volume(volume.path("exports/events"), delta_version=0)


# -- demo and notebook --------------------------------------------------------------------------


@pytest.mark.slow
def test_demo_section_reads_twice_and_shows_the_split(volume, ray_cluster, capsys):
    from air_ray.demo import run

    volume.files("images", 24)
    run(volume.vol)
    out = capsys.readouterr().out
    assert "24 files" in out and "execution 2" in out and "rank 1" in out


@pytest.mark.slow
def test_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    # The kernel starts a Ray of its own, as a user's would: the session's workers do not see the
    # AIR_CACHE_DIR that the notebook sets, and each node resolves its own cache folder.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    nb = nbformat.read(ROOT / "notebooks" / "ray_data.ipynb", as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "execution 2" in text and "files in the node cache: 120" in text
    assert "files per rank: [40, 40, 40] overlap: 0" in text
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


# -- placement on a cluster: pure, no cluster needed --------------------------------------------


def _loads(weights, owner, nodes):
    return {n: sum(w for w, o in zip(weights, owner) if o == n) for n in nodes}


@pytest.mark.parametrize("buckets, nodes", [(9, 2), (100, 3), (1024, 8), (3, 5)])
def test_placement_is_stable_and_each_node_holds_its_share_within_one_bucket(buckets, nodes):
    weights = [1000 + (k * 7919) % 50_000 for k in range(buckets)]
    cpus = {f"node{n}": 1.0 for n in range(nodes)}
    owner = placement.place(weights, cpus)
    assert owner == placement.place(weights, dict(reversed(cpus.items())))  # no order, no state
    for load in _loads(weights, owner, cpus).values():
        assert load <= sum(weights) / nodes + max(weights)


def test_placement_follows_cpus_and_skips_nodes_without_any():
    weights = [10] * 300
    owner = placement.place(weights, {"big": 3.0, "small": 1.0, "head": 0.0})
    loads = _loads(weights, owner, ["big", "small", "head"])
    assert loads["head"] == 0 and abs(loads["big"] - 2250) <= 10 and abs(loads["small"] - 750) <= 10
    with pytest.raises(ValueError, match="no node with CPUs"):
        placement.place(weights, {"head": 0.0})


def test_a_node_leaving_or_joining_moves_little_more_than_its_own_buckets():
    weights = [1000 + (k * 7919) % 50_000 for k in range(400)]
    nodes = {f"node{n}": 1.0 for n in range(4)}
    before = placement.place(weights, nodes)
    gone = placement.place(weights, {n: c for n, c in nodes.items() if n != "node3"})
    lost = before.count("node3")
    moved = sum(a != b for a, b in zip(before, gone))
    assert lost <= moved <= lost * 1.25  # plain hashing moves exactly `lost`; bounded loads a few more
    joined = placement.place(weights, {**nodes, "node4": 1.0})
    taken = joined.count("node4")
    assert taken <= sum(a != b for a, b in zip(before, joined)) <= taken * 1.25


def test_buckets_depend_on_the_listing_alone():
    sizes = [(i * 7919) % 5000 + 1 for i in range(1000)]
    assert placement.bucket_count(15) == 15 and placement.bucket_count(0) == 0
    assert placement.bucket_count(10**7) == placement.MAX_BUCKETS
    bucket = placement.buckets(sizes, 15)
    totals = [sum(s for s, b in zip(sizes, bucket) if b == k) for k in range(15)]
    assert max(totals) - min(totals) <= max(sizes)
    assert placement.buckets(sizes, 1).tolist() == [0] * 1000


def test_by_node_parts_are_disjoint_complete_and_the_same_every_execution(volume):
    volume.files("d", 700, size=lambda i: 50 + (i * 7919) % 5000)
    source = UCVolumeDatasource(volume.path("d"), shuffle=FileShuffleConfig(seed=4), include_paths=True)
    parts = source.by_node({"a": 1.0, "b": 1.0, "head": 0.0})
    assert set(parts) == {"a", "b"}

    def files(part, execution):
        context = DataContext.get_current()
        saved, context._execution_idx = context._execution_idx, execution
        try:
            return {p for t in part.get_read_tasks(3, data_context=context) for p in t.metadata.input_files}
        finally:
            context._execution_idx = saved

    a, b = files(parts["a"], 0), files(parts["b"], 0)
    assert not a & b and len(a | b) == 700
    assert files(parts["a"], 1) == a and files(parts["b"], 2) == b  # reshuffled, never moved
    assert abs(parts["a"].estimate_inmemory_data_size() - parts["b"].estimate_inmemory_data_size()) \
        < source.estimate_inmemory_data_size() / 4
    assert len(cloudpickle.dumps(parts["a"])) < len(cloudpickle.dumps(parts["a"]._bucket)) + 20_000


def test_parquet_by_node_parts_cover_every_row_once(volume):
    expected = write_table(volume, "t", files_per_split=3, rows=40, row_group=10)  # 24 row groups
    parts = UCVolumeDatasource(volume.path("t")).by_node({"a": 1.0, "b": 1.0})
    ids = {n: [i for t in p.get_read_tasks(4) for block in t() for i in block.column("id").to_pylist()]
           for n, p in parts.items()}
    assert sorted(ids["a"] + ids["b"]) == sorted(r["id"] for r in expected)
    assert abs(len(ids["a"]) - len(ids["b"])) <= 2 * 10  # within one bucket (a row group) of half each


def test_local_path_of_a_row_is_valid_on_any_node(volume, tmp_path):
    from air_core import FetchError

    volume.files("d", 3)
    row = next(r for t in UCVolumeDatasource(volume.path("d")).get_read_tasks(1) for b in t() for r in b.to_pylist())
    assert air_ray.local_path(row) == row["local_path"]  # the node that read it: as it is
    # On another node the row's copy is not there: that node gets its own copy, of the same bytes.
    moved = {**row, "local_path": str(tmp_path / "other-node" / Path(row["local_path"]).name)}
    elsewhere = str(tmp_path / "this-node-cache")
    copy = air_ray.local_path(moved, cache_dir=elsewhere)
    assert copy.startswith(elsewhere) and Path(copy).read_bytes() == Path(row["local_path"]).read_bytes()
    assert air_ray.local_path(moved, cache_dir=elsewhere) == copy
    volume.local(row["path"][len(volume.vol) + 1:]).write_bytes(b"new contents")
    with pytest.raises(FetchError, match="changed on the volume"):
        air_ray.local_path({**moved, "local_path": "/nowhere/" + Path(copy).name}, cache_dir=str(tmp_path / "c3"))
    with pytest.raises(OptionError, match="include_paths"):
        air_ray.local_path({"local_path": "/nowhere/x", "size": 1})


# -- mixtures -----------------------------------------------------------------


def mixture(volume) -> list[dict]:
    volume.files("chat", 50, size=lambda i: 50 + (i * 7919) % 3000)
    volume.files("safety", 4)
    return [{"path": volume.path("chat"), "choose": 25}, {"path": volume.path("safety"), "choose": 8}]


def test_a_mixtures_read_tasks_read_each_sources_share_per_execution(volume):
    source = UCVolumeDatasource(sources=mixture(volume), shuffle=FileShuffleConfig(seed=3), include_paths=True)
    chat = Counter()
    context = DataContext.get_current()
    for execution in range(2):
        saved, context._execution_idx = context._execution_idx, execution
        try:
            tasks = source.get_read_tasks(3, data_context=context)
        finally:
            context._execution_idx = saved
        assert sum(t.metadata.num_rows for t in tasks) == 33
        got = Counter(p for t in tasks for block in t() for p in block.column("path").to_pylist())
        assert sorted(c for p, c in got.items() if "/safety/" in p) == [2, 2, 2, 2]
        chat.update(p for p in got if "/chat/" in p)
    assert len(chat) == 50 and set(chat.values()) == {1}  # 2 x 25 of 50: every file once


def test_a_mixtures_read_task_says_what_it_reads_in_order_once_shipped(volume):
    volume.files("code", 6)
    sources = mixture(volume) + [{"path": volume.path("code"), "choose": 0}]  # no task draws from it: empty shares
    source = UCVolumeDatasource(sources=sources, shuffle=FileShuffleConfig(seed=5), include_paths=True,
                                include_bytes=True)
    tasks = source.get_read_tasks(3)
    for task in cloudpickle.loads(cloudpickle.dumps(tasks)):  # as Ray ships them
        rows = [r for block in task() for r in block.to_pylist()]
        assert list(task.metadata.input_files) == [r["path"] for r in rows]
        assert task.metadata.num_rows == len(rows) and all(r["size"] == len(r["bytes"]) for r in rows)
        assert task.metadata.size_bytes >= sum(len(r["bytes"]) for r in rows)  # the contents counted, with more
    assert sum(t.metadata.num_rows for t in tasks) == 33


def test_a_mixture_of_tables_reads_each_sources_rows_per_execution(volume):
    for f in range(2):
        path = volume.local(f"chat/part-{f}.parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        ids = list(range(60 * f, 60 * f + 60))
        pq.write_table(pa.table({"id": ids, "text": [f"row {i}" for i in ids]}), path, row_group_size=8)
    volume.write("code/a.jsonl", "".join(json.dumps({"id": 1000 + i, "text": f"row {1000 + i}"}) + "\n"
                                         for i in range(9)))
    sources = [{"path": volume.path("chat"), "choose": 50}, {"path": volume.path("code"), "choose": 18}]
    write_table(volume, "hive")
    with pytest.raises(OptionError, match=r"sources\[0\] \(.*hive\) holds rows of \(id: int64, text: string, split"):
        UCVolumeDatasource(sources=[{"path": volume.path("hive"), "choose": 5}] + sources)
    source = UCVolumeDatasource(sources=sources, shuffle=FileShuffleConfig(seed=3))
    chat = Counter()
    context = DataContext.get_current()
    for execution in range(2):
        saved, context._execution_idx = context._execution_idx, execution
        try:
            tasks = source.get_read_tasks(3, data_context=context)
        finally:
            context._execution_idx = saved
        assert sum(t.metadata.num_rows for t in tasks) == 68
        got = Counter(i for t in tasks for block in t() for i in block.column("id").to_pylist())
        assert {i: c for i, c in got.items() if i >= 1000} == {1000 + i: 2 for i in range(9)}
        chat.update(i for i in got if i < 1000)
    assert len(chat) == 100 and set(chat.values()) == {1}  # 2 x 50 of 120 rows: none twice


def interleaving_tables(volume) -> list[dict]:
    """Parquet ids 0..119 in row groups of 8 beside JSON Lines ids 1000..1023: 40 and 16 of them an epoch."""
    path = volume.local("chat/part-0.parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": list(range(120)), "text": [f"row {i}" for i in range(120)]}), path,
                   row_group_size=8)
    volume.write("code/a.jsonl", "".join(json.dumps({"id": 1000 + i, "text": f"row {1000 + i}"}) + "\n"
                                         for i in range(24)))
    return [{"path": volume.path("chat"), "choose": 40}, {"path": volume.path("code"), "choose": 16}]


def switches(ids: list[int]) -> int:
    """How often a run of rows changes from one source to the other."""
    return sum((a >= 1000) != (b >= 1000) for a, b in zip(ids, ids[1:]))


def test_a_shuffled_mixture_of_tables_interleaves_its_sources_rows_inside_a_read_task(volume):
    source = UCVolumeDatasource(sources=interleaving_tables(volume), shuffle=FileShuffleConfig(seed=3),
                                include_paths=True)
    (task,) = source.get_read_tasks(1)
    blocks = [b.to_pylist() for b in task()]
    ids = [r["id"] for b in blocks for r in b]
    assert len(ids) == len(set(ids)) == 56 and sum(i >= 1000 for i in ids) == 16  # every row once
    # Read source by source, the ids would change source once; bundles of four pieces shuffled together
    # change it inside blocks, again and again.
    assert max(switches([r["id"] for r in b]) for b in blocks) >= 4
    for row in (r for b in blocks for r in b):  # each row's path is its own source's file
        assert row["path"].endswith("/code/a.jsonl" if row["id"] >= 1000 else "/chat/part-0.parquet")
    again = [r["id"] for t in source.get_read_tasks(1) for b in t() for r in b.to_pylist()]
    assert again == ids  # the same order every time it is read (a resumed or retried task reads the same)


@pytest.mark.slow
def test_a_shuffled_mixture_of_tables_through_read_uc_volume_interleaves_rows_in_blocks(volume, ray_cluster):
    ds = read_uc_volume(sources=interleaving_tables(volume), shuffle=FileShuffleConfig(seed=1), override_num_blocks=1)
    blocks = [b["id"].to_pylist() for b in ds.iter_batches(batch_size=None, batch_format="pyarrow")]
    ids = [i for b in blocks for i in b]
    assert len(ids) == len(set(ids)) == 56 and sum(i >= 1000 for i in ids) == 16
    assert max(switches(b) for b in blocks) >= 4


@pytest.mark.slow
def test_a_mixture_of_tables_through_read_uc_volume_gives_ranks_equal_shares(volume, ray_cluster):
    write_table(volume, "a", rows=30, row_group=8)  # 120 rows, ids 0..119
    write_table(volume, "b", files_per_split=1, rows=7)  # 14 rows, ids 0..13
    sources = [{"path": volume.path("a"), "proportion": 0.8}, {"path": volume.path("b"), "proportion": 0.2}]
    got = [read_uc_volume(sources=sources, epoch_size=50, rank=r, world_size=2, equalize="pad",
                          include_paths=True).take_all() for r in range(2)]
    assert [len(g) for g in got] == [25, 25]
    every = Counter(row["path"].split("/")[5] for g in got for row in g)
    assert every == {"a": 40, "b": 10}


@pytest.mark.slow
def test_a_mixture_through_read_uc_volume_gives_ranks_equal_shares(volume, ray_cluster):
    sources = mixture(volume)
    got = [[r["path"] for r in read_uc_volume(sources=sources, rank=r, world_size=2, equalize="pad",
                                              shuffle=FileShuffleConfig(seed=1)).take_all()] for r in range(2)]
    assert [len(g) for g in got] == [17, 17]  # 33 items, one repeated to pad the short rank
    every = Counter(p for g in got for p in g)
    assert sum(every.values()) == 34 and len({p for p in every if "/safety/" in p}) == 4
    assert sum(c for p, c in every.items() if "/chat/" in p) in (25, 26)
    assert sum(c for p, c in every.items() if "/safety/" in p) in (8, 9)


def test_a_mixture_refuses_a_selection_beside_its_sources_and_files_beside_tables(volume):
    with pytest.raises(OptionError, match="give include= there"):
        UCVolumeDatasource(sources=mixture(volume), include="*.bin")
    with pytest.raises(OptionError, match="mode='parquet' beside sources=: give mode= in each source's dict"):
        UCVolumeDatasource(sources=mixture(volume), mode="parquet")
    write_table(volume, "table")
    with pytest.raises(OptionError, match=r"sources\[0\] \(.*chat\) is read as loose files but sources\[2\] "
                                          r"\(.*table\) as a table's rows \(mode 'parquet'\)"):
        read_uc_volume(sources=mixture(volume) + [{"path": volume.path("table"), "choose": 5, "mode": "auto"}])
    with pytest.raises(OptionError, match=r"sources\[2\] \(.*table\) asks for mode 'parquet', a table's rows, "
                                          r"in a mixture of loose files: mix tables' rows with read_uc_volume\("):
        read_uc_volume(sources=mixture(volume) + [{"path": volume.path("table"), "choose": 5, "mode": "parquet"}],
                       mode="files")
    with pytest.raises(OptionError, match=r"sources\[2\] \(.*table\) is read in mode 'parquet' \(what its files are\), "
                                          r"a table's rows, in a mixture of loose files: mix tables' rows with "
                                          r"read_uc_volume\("):
        read_uc_volume(sources=mixture(volume) + [{"path": volume.path("table"), "choose": 5, "mode": "auto"}],
                       mode="files")
