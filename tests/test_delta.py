"""export_delta: a Delta table (deltalake, or Spark Connect) -> Parquet on a volume, atomic, once per version."""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake

from air_core import volume as volume_mod
from air_core.cli_delta import add_export_delta_command
from air_core.delta import MARKER, TableError, export_delta, layout
from air_core.errors import OptionError, VolumePathError
from air_core.manifest import list_folder
from conftest import wait_for

EXPORT = Path(__file__).parent / "scripts" / "delta_export.py"
SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("text", pa.string()), ("split", pa.string())])


def rows(ids, split) -> list[dict]:
    return [{"id": i, "x": i / 2, "text": f"row {i} " * 3, "split": split(i)} for i in ids]


def append(path, new: list[dict], mode: str = "append") -> None:
    write_deltalake(str(path), pa.Table.from_pylist(new, schema=SCHEMA), partition_by=["split"], mode=mode)


def build_table(path) -> dict[int, list[dict]]:
    """Four versions (write, append, delete, append), partitioned by `split` (one partition null); rows by version."""
    versions = {0: rows(range(240), lambda i: ("train", "test", None)[i % 3])}
    append(path, versions[0])
    more = rows(range(240, 300), lambda i: "val")
    append(path, more)
    versions[1] = versions[0] + more
    DeltaTable(str(path)).delete("id % 7 = 0")
    versions[2] = [r for r in versions[1] if r["id"] % 7]
    extra = rows(range(300, 330), lambda i: "train")
    append(path, extra)
    versions[3] = versions[2] + extra
    return versions


def by_id(table_rows) -> list[dict]:
    return sorted(table_rows, key=lambda r: r["id"])


def read_export(path: str) -> list[dict]:
    """Every row under a volume folder, listed as readers list it."""
    m = list_folder(path)
    local = volume_mod.parse(path).local
    return by_id(r for p in m.paths for r in pq.read_table(f"{local}/{p}").to_pylist())


def tree_state(folder: Path) -> dict:
    """(inode, links, mtime, size) of `folder` and of every entry under it, links not followed.

    Access times are left out: walking the tree to take this snapshot updates them.
    """
    def state(p) -> tuple:
        st = os.lstat(p)
        return st.st_ino, st.st_nlink, st.st_mtime_ns, st.st_size

    out = {".": state(folder)}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            out[os.path.relpath(p, folder)] = state(p)
    return out


def exports_in(home: Path) -> set[str]:
    return {p.name for p in home.iterdir() if p.is_dir()}


# -- deltalake path ------------------------------------------------------------------------------------

def test_each_version_exports_exactly_its_rows(volume):
    versions = build_table(volume.local("tables/events"))
    table, dest = volume.path("tables/events"), volume.path("exports/events")
    for v in (0, 2, 1):  # going back to an older version is an export too
        r = export_delta(table, dest, version=v)
        assert (r.version, r.skipped, r.rows, r.dest, r.table) == (v, False, len(versions[v]), dest, table)
        assert read_export(dest) == by_id(versions[v])
        assert read_export(r.path) == by_id(versions[v])
    latest = export_delta(table, dest)
    assert latest.version == 3 and read_export(dest) == by_id(versions[3])
    first = pq.read_schema(volume.local(f"exports/events/{latest.files[0]}"))
    assert first.field("split").type == pa.string()  # the partition column is a real column
    assert any(r["split"] is None for r in read_export(dest))
    assert list_folder(volume.path("exports")).paths == tuple(f"events/{f}" for f in latest.files)


def test_same_version_writes_nothing_and_a_newer_one_replaces_it(volume):
    table_dir = volume.local("tables/t")
    append(table_dir, rows(range(50), lambda i: "a"))
    table, dest = volume.path("tables/t"), volume.path("out/t")
    first = export_delta(table, dest)
    before = tree_state(volume.local("out"))
    again = export_delta(table, dest)
    assert again.skipped and again.path == first.path and again.files == first.files
    assert tree_state(volume.local("out")) == before

    append(table_dir, rows(range(50, 80), lambda i: "b"))
    second = export_delta(table, dest)
    assert (second.version, second.rows, second.skipped) == (1, 80, False) and second.path != first.path
    assert os.readlink(volume.local("out/t")) == f".t.exports/{second.path.rsplit('/', 1)[1]}"
    assert read_export(first.path) == by_id(rows(range(50), lambda i: "a"))  # kept for readers still on it
    append(table_dir, rows(range(80, 90), lambda i: "c"))
    third = export_delta(table, dest)
    home = volume.local("out/.t.exports")
    assert exports_in(home) == {second.path.rsplit("/", 1)[1], third.path.rsplit("/", 1)[1]}
    marker = json.loads(volume.local(f"out/t/{MARKER}").read_text())
    assert marker["key"]["version"] == 2 and marker["rows"] == 90
    assert marker["key"]["table_id"] == DeltaTable(str(table_dir)).metadata().id


def inline_deletion_vector(positions: list[int]) -> dict:
    """A Delta deletion vector descriptor holding `positions`, stored inline (Z85 of a RoaringTreemap)."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    pos = sorted(positions)
    bitmap = (struct.pack("<IIHHI", 12346, 1, 0, len(pos) - 1, 16) + b"".join(struct.pack("<H", p) for p in pos))
    data = struct.pack("<IQI", 1681511377, 1, 0) + bitmap
    size, data = len(data), data + b"\0" * (-len(data) % 4)
    chars = []
    for k in range(0, len(data), 4):
        n = struct.unpack(">I", data[k:k + 4])[0]
        chars += [alphabet[n // 85 ** e % 85] for e in range(4, -1, -1)]
    return {"storageType": "i", "pathOrInlineDv": "".join(chars), "sizeInBytes": size, "cardinality": len(pos)}


def deletion_vector_table(path) -> list[dict]:
    """A table whose delete is a deletion vector (two rows of one file), as Spark on Databricks writes; its rows."""
    append(path, rows(range(20), lambda i: "ab"[i % 2]))
    DeltaTable(str(path)).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    log = sorted((path / "_delta_log").glob("*.json"))
    add = next(json.loads(line)["add"] for line in log[0].read_text().splitlines()
               if '"add"' in line and "split=a" in line)
    ids_in_file = pq.read_table(path / add["path"]).column("id").to_pylist()
    remove = {k: add[k] for k in ("path", "partitionValues", "size")}
    with open(path / "_delta_log" / f"{len(log):020d}.json", "w") as f:
        f.write(json.dumps({"commitInfo": {"timestamp": 1, "operation": "DELETE"}}) + "\n")
        f.write(json.dumps({"remove": {**remove, "dataChange": True, "deletionTimestamp": 1}}) + "\n")
        f.write(json.dumps({"add": {**add, "deletionVector": inline_deletion_vector([0, 2])}}) + "\n")
    deleted = {ids_in_file[0], ids_in_file[2]}
    return rows([i for i in range(20) if i not in deleted], lambda i: "ab"[i % 2])


def test_deletion_vectors_are_applied(volume):
    expected = deletion_vector_table(volume.local("tables/dv"))
    r = export_delta(volume.path("tables/dv"), volume.path("exports/dv"))
    assert r.rows == 18 and read_export(r.dest) == by_id(expected)


def test_an_emptied_table_exports_its_schema(volume):
    append(volume.local("tables/e"), rows(range(10), lambda i: "a"))
    DeltaTable(str(volume.local("tables/e"))).delete()
    r = export_delta(volume.path("tables/e"), volume.path("exports/e"))
    assert (r.version, r.rows, len(r.files)) == (1, 0, 1)
    assert pq.read_schema(volume.local(f"exports/e/{r.files[0]}")).names == SCHEMA.names


def test_files_and_row_groups_have_the_sizes_asked(volume):
    append(volume.local("tables/s"), rows(range(1000), lambda i: "ab"[i % 2]))
    r = export_delta(volume.path("tables/s"), volume.path("exports/s"), rows_per_file=300, rows_per_row_group=100)
    counts = []
    for f in r.files:
        md = pq.read_metadata(volume.local(f"exports/s/{f}"))
        groups = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
        assert md.num_rows <= 300 and max(groups) <= 100 and all(g == 100 for g in groups[:-1])
        counts.append(md.num_rows)
    assert sum(counts) == 1000 == r.rows


def test_layout_sizes_row_groups_by_bytes():
    assert layout(None) == (8 * 131072, 131072)
    assert layout(1000.0) == (8 * 16777, 16777)  # ~16 MiB per row group
    assert layout(1e9)[1] == 64 and layout(1e-3)[1] == 1 << 20  # clamped
    assert layout(100.0, rows_per_file=50) == (50, 50)
    assert layout(None, rows_per_row_group=10) == (80, 10)
    with pytest.raises(OptionError, match="rows_per_file=10 is below rows_per_row_group=20"):
        layout(None, 10, 20)


@pytest.mark.slow
def test_kill_9_mid_export_leaves_the_previous_export_served(volume, slowvol_so):
    table_dir = volume.local("tables/k")
    append(table_dir, rows(range(100), lambda i: "a"))
    for k in range(1, 13):
        append(table_dir, rows(range(100 * k, 100 * k + 100), lambda i: "ab"[i % 2]))
    table, dest = volume.path("tables/k"), volume.path("exports/k")
    export_delta(table, dest, version=0)
    old_rows = by_id(rows(range(100), lambda i: "a"))
    link = volume.local("exports/k")
    home = volume.local("exports/.k.exports")
    target = os.readlink(link)
    # the table reads slowly (a remote volume), so the child is caught writing
    env = {**os.environ, "LD_PRELOAD": slowvol_so, "SLOWVOL_PREFIX": f"{table_dir}/",
           "SLOWVOL_OPEN_MS": "400", "SLOWVOL_MBPS": "0.2"}
    child = subprocess.Popen([sys.executable, str(EXPORT), table, dest, "100", "50"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: list(home.glob("v12-*/*.parquet")) or child.poll() is not None, 120,
                 "the child to start writing")
        assert child.poll() is None, child.communicate()
        assert read_export(dest) == old_rows  # a reader meanwhile sees the previous export, whole
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    assert child.returncode == -signal.SIGKILL
    assert os.readlink(link) == target and read_export(dest) == old_rows
    assert json.loads((link / MARKER).read_text())["key"]["version"] == 0
    new = export_delta(table, dest, rows_per_file=100, rows_per_row_group=50)  # the lock died with the child
    assert (new.version, new.rows, new.skipped) == (12, 1300, False)
    assert len(read_export(dest)) == 1300
    assert exports_in(home) == {target.split("/")[1], new.path.rsplit("/", 1)[1]}  # leftovers removed


@pytest.mark.slow
def test_fresh_processes_exit_cleanly_and_take_turns(volume):
    """deltalake's reader can abort the interpreter at exit (exit 134); exports in fresh processes must not."""
    append(volume.local("tables/p"), rows(range(3000), lambda i: "abc"[i % 3]))
    deletion_vector_table(volume.local("tables/dv"))  # read by deltalake's engine, not pyarrow's
    table = volume.path("tables/p")
    runs = ([(table, volume.path(f"exports/own{k}")) for k in range(4)]
            + [(volume.path("tables/dv"), volume.path(f"exports/dv{k}")) for k in range(2)]
            + [(table, volume.path("exports/shared"))] * 3)
    procs = [subprocess.Popen([sys.executable, str(EXPORT), t, d], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for t, d in runs]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "terminate called" not in err, err[-2000:]
    results = [json.loads(out) for out, _ in outs]
    assert [r["rows"] for r in results] == [3000] * 4 + [18] * 2 + [3000] * 3
    shared = results[6:]
    assert sorted(r["skipped"] for r in shared) == [False, True, True]  # one wrote, the others found it
    assert len({r["path"] for r in shared}) == 1


@pytest.mark.parametrize("case", ["missing", "not_delta", "no_version", "negative_version", "unwritable",
                                  "inside_table", "occupied", "volume_root", "no_volume", "not_volume",
                                  "zero_rows"])
def test_bad_inputs_fail_clearly(volume, case):
    append(volume.local("tables/b"), rows(range(10), lambda i: "a"))
    volume.local("tables/empty").mkdir()
    volume.write("exports/occupied/data.csv", "a,b\n")
    volume.write("exports/afile", "x")
    table, dest = volume.path("tables/b"), volume.path("exports/b")
    error, match, call = {
        "missing": (TableError, "does not exist", lambda: export_delta(volume.path("tables/nope"), dest)),
        "not_delta": (TableError, "is not a Delta table", lambda: export_delta(volume.path("tables/empty"), dest)),
        "no_version": (TableError, "has no version 5: its latest version is 0",
                       lambda: export_delta(table, dest, version=5)),
        "negative_version": (OptionError, "version=-1", lambda: export_delta(table, dest, version=-1)),
        "unwritable": (VolumePathError, "cannot write an export beside",
                       lambda: export_delta(table, volume.path("exports/afile/b"))),
        "inside_table": (VolumePathError, "is inside the table",
                         lambda: export_delta(table, volume.path("tables/b/export"))),
        "occupied": (VolumePathError, "is not an export made by export_delta",
                     lambda: export_delta(table, volume.path("exports/occupied"))),
        "volume_root": (VolumePathError, "is a volume's root", lambda: export_delta(table, volume.path())),
        "no_volume": (VolumePathError, "the volume /Volumes/main/ml/nope does not exist",
                      lambda: export_delta(table, "/Volumes/main/ml/nope/b")),
        "not_volume": (VolumePathError, "not a Unity Catalog volume path", lambda: export_delta(table, "/tmp/x")),
        "zero_rows": (OptionError, "rows_per_file=0", lambda: export_delta(table, dest, rows_per_file=0)),
    }[case]
    with pytest.raises(error, match=match):
        call()
    assert not volume.local("exports/b").exists() and not volume.local("tables/b/export").exists()
    assert not (volume.root / "main" / "ml" / "nope").exists()
    assert sorted(p.name for p in volume.local("exports").iterdir()) == ["afile", "occupied"]


def test_a_data_file_gone_from_the_table_is_a_clear_error_and_leaves_nothing(volume):
    table_dir = volume.local("tables/v")
    append(table_dir, rows(range(10), lambda i: "a"))
    append(table_dir, rows(range(10, 20), lambda i: "b"))
    os.unlink(sorted(table_dir.rglob("*.parquet"))[0])  # as a VACUUM or a hand would
    with pytest.raises(TableError, match=r"version 1 of /Volumes/main/ml/raw/tables/v cannot be read: .*"
                                         r"export a later version, or restore the file"):
        export_delta(volume.path("tables/v"), volume.path("out/v"))
    assert not volume.local("out/v").exists()
    assert [p.name for p in volume.local("out/.v.exports").iterdir()] == [".lock"]


def test_a_file_system_without_links_fails_before_writing(volume, monkeypatch):
    # Some FUSE mounts refuse symlink(2); none of this machine's file systems does, so refuse it here.
    append(volume.local("tables/t"), rows(range(10), lambda i: "a"))

    def refuse(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", refuse)
    with pytest.raises(VolumePathError, match="its file system refuses symbolic links"):
        export_delta(volume.path("tables/t"), volume.path("out/t"))
    assert not volume.local("out/t").exists()
    assert not list(volume.local("out").rglob("*.parquet"))


def test_cli_exports_with_a_progress_bar(volume, capsys):
    versions = build_table(volume.local("tables/c"))
    parser = argparse.ArgumentParser(prog="air-data")
    add_export_delta_command(parser.add_subparsers(dest="command", required=True))

    def run(*argv: str) -> str:
        args = parser.parse_args(["export-delta", *argv])
        args.func(args)
        return capsys.readouterr()

    out = run(volume.path("tables/c"), volume.path("exports/c"), "--version", "1", "--rows-per-file", "100")
    assert f"exported version 1 of {volume.path('tables/c')}: 300 rows in 3 files" in out.out
    assert "300/300" in out.err  # tqdm's bar
    assert read_export(volume.path("exports/c")) == by_id(versions[1])
    again = run(volume.path("tables/c"), volume.path("exports/c"), "--version", "1", "--rows-per-file", "100")
    assert "already holds version 1" in again.out


# -- Spark Connect ------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local Spark Connect server for the session (its JVM lives until the process exits)."""
    from pyspark.sql import SparkSession

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    warehouse = tmp_path_factory.mktemp("warehouse")
    with warnings.catch_warnings():  # static settings are passed to the server, then reported unsettable
        warnings.simplefilter("ignore")
        session = (SparkSession.builder.remote("local[1]")
                   .config("spark.sql.warehouse.dir", str(warehouse))
                   .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    yield session
    session.stop()


def spark_rows(spark, n: int):
    return spark.range(n).selectExpr("id", "id / 2 as x", "repeat(concat('row ', id, ' '), 3) as text",
                                     "CASE WHEN id % 3 = 0 THEN 'test' ELSE 'train' END as split")


@pytest.mark.slow
def test_spark_connect_export_streams_back_through_hf(volume, spark):
    import datasets

    import air_hf  # noqa: F401  (registers "uc-volume")

    spark_rows(spark, 500).write.mode("overwrite").partitionBy("split").saveAsTable("events")
    dest = volume.path("exports/spark_events")
    r = export_delta("events", dest, spark=spark, rows_per_file=120)
    assert (r.rows, r.skipped, r.version, r.table) == (500, False, None, "events") and len(r.files) >= 5
    expected = by_id(rows(range(500), lambda i: "test" if i % 3 == 0 else "train"))
    ds = datasets.load_dataset("uc-volume", data_dir=dest, streaming=True, split="train")
    assert by_id(ds) == expected

    again = export_delta("events", dest, spark=spark, rows_per_file=120)
    assert again.skipped and again.path == r.path
    spark_rows(spark, 600).write.mode("overwrite").partitionBy("split").saveAsTable("events")
    newer = export_delta("events", dest, spark=spark, rows_per_file=120)
    assert (newer.rows, newer.skipped) == (600, False) and newer.path != r.path
    assert read_export(dest) == by_id(rows(range(600), lambda i: "test" if i % 3 == 0 else "train"))

    with pytest.raises(TableError, match="Spark could not read table 'no_such_table'"):
        export_delta("no_such_table", volume.path("exports/none"), spark=spark)
    with pytest.raises(TableError, match="time travel.* needs a Delta table"):
        export_delta("events", volume.path("exports/old"), spark=spark, version=0)
    with pytest.raises(OptionError, match="rows_per_row_group applies to the deltalake path"):
        export_delta("events", dest, spark=spark, rows_per_row_group=10)


# -- the notebook --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_notebook_runs(tmp_path):
    import nbclient
    import nbformat

    nb = nbformat.read(Path(__file__).parent.parent / "notebooks" / "delta_tabular.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                            ).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "version 3 rows 900" in text and "900 rows" in text
