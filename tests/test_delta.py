"""export_delta: a Delta table (deltalake, or Spark Connect) -> Parquet on a volume, atomic, once per version."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake

from air_core.io import volume as volume_mod
from air_core.cli.delta import add_export_delta_command
from air_core.delta import TableError, current_export, export_delta, publication, sizing
from air_core.delta.publication import EXPORTS, POINTER
from air_core.errors import EmptyVolumeError, OptionError, VolumePathError
from air_core.io.listing import list_folder
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


def served(dest: str) -> list[dict]:
    """Every row of the export a destination serves, as the front doors find it."""
    return read_export(current_export(dest))


def local(path: str) -> Path:
    return Path(volume_mod.parse(path).local)


def pointer(dest: str) -> dict:
    return json.loads((local(dest) / POINTER).read_text())


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


def exports_in(dest: str) -> set[str]:
    """The export folders of a destination, as volume paths (comparable with `ExportResult.path`)."""
    return {f"{dest}/{EXPORTS}/{p.name}" for p in (local(dest) / EXPORTS).iterdir()}


def strict_env(volume, netvol_so: str, **extra: str) -> dict:
    """The environment of a child process that sees the volume as object storage (netvol's strict mode)."""
    return {**os.environ, "LD_PRELOAD": netvol_so, "NETVOL_STRICT": "1", "NETVOL_PREFIX": f"{volume.root}/",
            "NETVOL_OPEN_MS": "0", **extra}


def run_export(args: list[str], env: dict) -> dict:
    """Run tests/scripts/delta_export.py in a fresh process; its ExportResult as a dict."""
    proc = subprocess.run([sys.executable, str(EXPORT), *args], env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


# -- deltalake path ------------------------------------------------------------------------------------

def test_each_version_exports_exactly_its_rows(volume):
    versions = build_table(volume.local("tables/events"))
    table, dest = volume.path("tables/events"), volume.path("exports/events")
    for v in (0, 2, 1):  # going back to an older version is an export too
        r = export_delta(table, dest, version=v)
        assert (r.version, r.skipped, r.rows, r.dest, r.table) == (v, False, len(versions[v]), dest, table)
        assert current_export(dest) == r.path and read_export(r.path) == by_id(versions[v])
    latest = export_delta(table, dest)
    assert latest.version == 3 and served(dest) == by_id(versions[3])
    assert list(list_folder(latest.path).paths) == list(latest.files)  # the export's folder holds exactly its files
    first = pq.read_schema(local(latest.path) / latest.files[0])
    assert first.field("split").type == pa.string()  # the partition column is a real column
    assert any(r["split"] is None for r in served(dest))
    with pytest.raises(EmptyVolumeError):  # a plain listing of dest finds nothing, never several exports mixed
        list_folder(dest)


def test_a_foreign_reader_given_the_export_folder_reads_one_whole_export(volume, tmp_path):
    import datasets

    versions = build_table(volume.local("tables/f"))
    table, dest = volume.path("tables/f"), volume.path("exports/f")
    old = export_delta(table, dest, version=1)
    new = export_delta(table, dest)
    p = pointer(dest)
    folder = local(dest) / p["folder"]
    assert f"{dest}/{p['folder']}" == new.path == current_export(dest)
    assert sorted(os.listdir(folder)) == p["files"] == list(new.files)  # only the Parquet files
    for r, v in ((new, 3), (old, 1)):  # the replaced export stays whole for readers still on it
        ds = datasets.load_dataset("parquet", data_dir=str(local(r.path)), split="train",
                                   cache_dir=str(tmp_path / f"hf{v}"))
        assert by_id(ds) == by_id(versions[v])


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
    assert current_export(dest) == second.path
    assert read_export(first.path) == by_id(rows(range(50), lambda i: "a"))  # kept for readers still on it
    append(table_dir, rows(range(80, 90), lambda i: "c"))
    third = export_delta(table, dest)
    assert exports_in(dest) == {first.path, second.path, third.path}  # none was replaced an hour ago
    p = pointer(dest)
    assert (p["key"]["version"], p["rows"], p["files"]) == (2, 90, list(third.files))
    assert p["key"]["table_id"] == DeltaTable(str(table_dir)).metadata().id
    assert {f"{dest}/{f}" for f in p["retired"]} == {first.path, second.path}
    resized = export_delta(table, dest, rows_per_file=30)  # other sizes are another export
    assert not resized.skipped and len(resized.files) == 3


def test_old_exports_and_leftovers_are_removed_after_the_grace_period(volume, monkeypatch):
    table_dir = volume.local("tables/g")
    table, dest = volume.path("tables/g"), volume.path("out/g")
    append(table_dir, rows(range(10), lambda i: "a"))
    v0 = export_delta(table, dest)
    append(table_dir, rows(range(10, 20), lambda i: "a"))
    v1 = export_delta(table, dest)  # replaces v0, now in its grace period
    exports = local(dest) / EXPORTS
    long_ago = time.time() - 10
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(long_ago))
    killed = exports / f"v9-{stamp}-0a0a0a0a0a0a"  # what an export killed ten seconds ago leaves
    volume.write(f"out/g/{EXPORTS}/{killed.name}/part-0a0a0a0a0a0a-0.parquet", "half")
    unrenamed = volume.write(f"out/g/.{POINTER}.0b0b0b0b0b0b", "{}")  # a pointer its exporter never renamed
    for p in (killed / "part-0a0a0a0a0a0a-0.parquet", killed, unrenamed):
        os.utime(p, (long_ago, long_ago))
    running = exports / f"v9-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-0c0c0c0c0c0c"
    part = volume.write(f"out/g/{EXPORTS}/{running.name}/part-0c0c0c0c0c0c-0.parquet", "in progress")
    later = time.time() + publication.GRACE_SECONDS + 1  # v0 has been replaced for longer than the grace period
    os.utime(part, (later, later))  # another node's export, still writing then
    assert exports_in(dest) == {v0.path, v1.path, f"{dest}/{EXPORTS}/{killed.name}",
                                f"{dest}/{EXPORTS}/{running.name}"}
    append(table_dir, rows(range(20, 30), lambda i: "a"))
    monkeypatch.setattr(publication, "clock", lambda: later)
    v2 = export_delta(table, dest)
    assert exports_in(dest) == {v1.path, v2.path, f"{dest}/{EXPORTS}/{running.name}"}
    assert not unrenamed.exists()
    assert served(dest) == by_id(rows(range(30), lambda i: "a"))
    assert {f"{dest}/{f}" for f in pointer(dest)["retired"]} == {v0.path, v1.path}  # v0 listed, though gone


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
    assert r.rows == 18 and served(r.dest) == by_id(expected)


def test_an_emptied_table_exports_its_schema(volume):
    append(volume.local("tables/e"), rows(range(10), lambda i: "a"))
    DeltaTable(str(volume.local("tables/e"))).delete()
    r = export_delta(volume.path("tables/e"), volume.path("exports/e"))
    assert (r.version, r.rows, len(r.files)) == (1, 0, 1)
    assert pq.read_schema(local(r.path) / r.files[0]).names == SCHEMA.names


def row_groups(r) -> list[list[int]]:
    """Rows per row group, file by file, of an export."""
    out = []
    for f in r.files:
        md = pq.read_metadata(local(r.path) / f)
        out.append([md.row_group(g).num_rows for g in range(md.num_row_groups)])
    return out


def test_files_and_row_groups_have_the_sizes_asked(volume):
    append(volume.local("tables/s"), rows(range(1000), lambda i: "ab"[i % 2]))
    table = volume.path("tables/s")
    r = export_delta(table, volume.path("exports/s"), rows_per_file=300, rows_per_row_group=100)
    for groups in row_groups(r):
        assert sum(groups) <= 300 and max(groups) <= 100 and all(g == 100 for g in groups[:-1])
    assert sum(map(sum, row_groups(r))) == 1000 == r.rows
    r = export_delta(table, volume.path("exports/s50"), rows_per_file=50)  # groups never span files
    assert [sum(g) for g in row_groups(r)] == [50] * 20
    with pytest.raises(OptionError, match="rows_per_file=10 is below rows_per_row_group=20"):
        export_delta(table, volume.path("exports/s10"), rows_per_file=10, rows_per_row_group=20)


def test_row_groups_hold_about_row_group_bytes_and_files_a_fixed_number_of_them(volume, monkeypatch):
    monkeypatch.setattr(sizing, "ROW_GROUP_BYTES", 32 << 10)  # a small target, so a small table has many groups
    n = 4000
    blobs = [os.urandom(100) for _ in range(n)]  # incompressible: the table's bytes per row hold in the export
    write_deltalake(str(volume.local("tables/z")), pa.table({"id": range(n), "blob": blobs}))
    r = export_delta(volume.path("tables/z"), volume.path("exports/z"))
    sizes = []
    for f in r.files:
        md = pq.read_metadata(local(r.path) / f)
        sizes.append([sum(md.row_group(g).column(c).total_compressed_size for c in range(md.num_columns))
                      for g in range(md.num_row_groups)])
    assert r.rows == n and len(sizes) > 1
    assert all(len(groups) == sizing.ROW_GROUPS_PER_FILE for groups in sizes[:-1])
    whole = [b for groups in sizes for b in groups][:-1]  # the last group holds what is left
    assert all(16 << 10 <= b <= 64 << 10 for b in whole), whole


# -- object storage: strict volume semantics, kills, concurrent exporters --------------------------------

STRICT_EXPORTS = """
import dataclasses, errno, json, os, sys
from air_core.delta import TableError, export_delta, publication

table, empty, broken, dest, probe = sys.argv[1:]
try:
    os.symlink("anything", probe)
except OSError as e:
    assert e.errno == errno.EPERM, e
else:
    raise AssertionError("netvol's strict mode is not in force: the volume allowed a symbolic link")
out = {"first": export_delta(table, dest, version=0), "again": export_delta(table, dest, version=0)}
publication.GRACE_SECONDS = 0  # the export replaced next is removed at once
out["newer"] = export_delta(table, dest)
out["empty"] = export_delta(empty, dest + "_empty")
try:
    export_delta(broken, dest + "_broken")
except TableError as e:
    out["broken"] = str(e)
print(json.dumps({k: v if isinstance(v, str) else dataclasses.asdict(v) for k, v in out.items()}))
"""


@pytest.mark.slow
def test_every_write_path_works_on_object_storage(volume, netvol_so):
    versions = build_table(volume.local("tables/o"))
    append(volume.local("tables/e"), rows(range(10), lambda i: "a"))
    DeltaTable(str(volume.local("tables/e"))).delete()
    append(volume.local("tables/b"), rows(range(10), lambda i: "a"))
    append(volume.local("tables/b"), rows(range(10, 20), lambda i: "b"))
    os.unlink(sorted(volume.local("tables/b").rglob("*.parquet"))[0])
    dest = volume.path("exports/o")
    proc = subprocess.run([sys.executable, "-c", STRICT_EXPORTS, volume.path("tables/o"), volume.path("tables/e"),
                           volume.path("tables/b"), dest, str(volume.local("probe"))],
                          env=strict_env(volume, netvol_so), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert (out["first"]["skipped"], out["again"]["skipped"], out["newer"]["skipped"]) == (False, True, False)
    assert out["again"]["path"] == out["first"]["path"]
    assert current_export(dest) == out["newer"]["path"] and served(dest) == by_id(versions[3])
    assert exports_in(dest) == {out["newer"]["path"]}  # the first one removed, its grace being 0
    assert out["empty"]["rows"] == 0 and read_export(current_export(dest + "_empty")) == []
    assert "cannot be read" in out["broken"] and current_export(dest + "_broken") is None
    assert list((volume.local("exports/o_broken") / EXPORTS).iterdir()) == []  # the failed export removed


@pytest.mark.slow
def test_kill_9_mid_export_leaves_the_previous_export_served(volume, netvol_so):
    table_dir = volume.local("tables/k")
    append(table_dir, rows(range(100), lambda i: "a"))
    for k in range(1, 13):
        append(table_dir, rows(range(100 * k, 100 * k + 100), lambda i: "ab"[i % 2]))
    table, dest = volume.path("tables/k"), volume.path("exports/k")
    old = export_delta(table, dest, version=0)
    old_rows = by_id(rows(range(100), lambda i: "a"))
    # the volume is slow object storage, so the child is caught writing
    env = strict_env(volume, netvol_so, NETVOL_OPEN_MS="400", NETVOL_MBPS="0.2")
    child = subprocess.Popen([sys.executable, str(EXPORT), table, dest, "100", "50"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    exports = local(dest) / EXPORTS
    try:
        wait_for(lambda: list(exports.glob("v12-*/*.parquet")) or child.poll() is not None, 120,
                 "the child to start writing")
        assert child.poll() is None, child.communicate()
        assert served(dest) == old_rows  # a reader meanwhile sees the previous export, whole
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    assert child.returncode == -signal.SIGKILL
    assert current_export(dest) == old.path and served(dest) == old_rows
    assert pointer(dest)["key"]["version"] == 0
    new = export_delta(table, dest, rows_per_file=100, rows_per_row_group=50)  # the node lock died with the child
    assert (new.version, new.rows, new.skipped) == (12, 1300, False)
    assert len(served(dest)) == 1300
    # the killed export's folder stays for the grace period: it looks like another node's export in progress
    assert len(exports_in(dest) - {old.path, new.path}) == 1


@pytest.mark.slow
def test_random_kills_on_object_storage_never_serve_half_an_export(volume, netvol_so):
    table_dir = volume.local("tables/r")
    append(table_dir, rows(range(200), lambda i: "a"))
    append(table_dir, rows(range(200, 800), lambda i: "ab"[i % 2]))
    table, dest = volume.path("tables/r"), volume.path("exports/r")
    old = export_delta(table, dest, version=0)
    old_rows = by_id(rows(range(200), lambda i: "a"))
    new_rows = by_id(rows(range(200), lambda i: "a") + rows(range(200, 800), lambda i: "ab"[i % 2]))
    env = strict_env(volume, netvol_so, NETVOL_OPEN_MS="30")  # each open a round trip: 40 files take a while
    args = [sys.executable, str(EXPORT), table, dest, "20", "20"]
    exports = local(dest) / EXPORTS
    rng = random.Random(7)

    def kill_when(ready) -> None:
        child = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: ready() or child.poll() is not None, 120, "the kill point")
        finally:
            child.kill()
            child.communicate()
        assert served(dest) in (old_rows, new_rows)  # a whole export, the previous or the new one
        assert sorted(os.listdir(local(current_export(dest)))) == pointer(dest)["files"]

    for k in rng.sample(range(1, 40), 4):  # while writing the k-th file
        before = set(exports.iterdir())
        kill_when(lambda: any(len(list(p.glob("*.parquet"))) >= k for p in set(exports.iterdir()) - before))
    killed_mid_write = exports_in(dest) - {old.path}
    for delay in (rng.uniform(0.5, 4.0) for _ in range(2)):  # anywhere, the pointer's renaming included
        deadline = time.monotonic() + delay
        kill_when(lambda: time.monotonic() > deadline)
    assert killed_mid_write and current_export(dest) not in killed_mid_write
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert (result["version"], result["rows"]) == (1, 800)
    assert current_export(dest) == result["path"] and served(dest) == new_rows


@pytest.mark.slow
def test_fresh_processes_exit_cleanly_and_take_turns(volume, netvol_so):
    """deltalake's reader can abort the interpreter at exit (exit 134); exports in fresh processes must not."""
    append(volume.local("tables/p"), rows(range(3000), lambda i: "abc"[i % 3]))
    deletion_vector_table(volume.local("tables/dv"))  # read by deltalake's engine, not pyarrow's
    table = volume.path("tables/p")
    runs = ([(table, volume.path(f"exports/own{k}"), os.environ) for k in range(4)]
            + [(volume.path("tables/dv"), volume.path(f"exports/dv{k}"), os.environ) for k in range(2)]
            + [(table, volume.path("exports/shared"), strict_env(volume, netvol_so))] * 3)
    procs = [subprocess.Popen([sys.executable, str(EXPORT), t, d], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for t, d, env in runs]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "terminate called" not in err, err[-2000:]
    results = [json.loads(out) for out, _ in outs]
    assert [r["rows"] for r in results] == [3000] * 4 + [18] * 2 + [3000] * 3
    shared = results[6:]
    assert sorted(r["skipped"] for r in shared) == [False, True, True]  # one wrote, the others found it
    assert {r["path"] for r in shared} == {current_export(volume.path("exports/shared"))}


@pytest.mark.slow
def test_exporters_on_two_nodes_at_once_end_with_one_whole_export(volume, netvol_so, tmp_path):
    expected = by_id(rows(range(3000), lambda i: "abc"[i % 3]))
    append(volume.local("tables/n"), expected)
    table, dest = volume.path("tables/n"), volume.path("exports/n")
    # Each node locks on its own local disk, so nothing makes these two take turns.
    envs = []
    for k in range(2):
        (tmp_path / f"node{k}").mkdir()
        envs.append(strict_env(volume, netvol_so, TMPDIR=str(tmp_path / f"node{k}")))
    procs = [subprocess.Popen([sys.executable, str(EXPORT), table, dest, "500", "100"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for env in envs]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    results = [json.loads(out) for out, _ in outs]
    assert [r["rows"] for r in results] == [3000, 3000]
    assert current_export(dest) in {r["path"] for r in results} and served(dest) == expected
    for r in results:  # whichever lost is whole too, kept for its readers
        assert read_export(r["path"]) == expected


# -- errors and the reader's contract ------------------------------------------------------------------

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
        "unwritable": (VolumePathError, "cannot write an export into .*/exports/afile/b",
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
    assert sorted(p.name for p in volume.local("exports/occupied").iterdir()) == ["data.csv"]


def test_a_data_file_gone_from_the_table_is_a_clear_error_and_leaves_nothing(volume):
    table_dir = volume.local("tables/v")
    append(table_dir, rows(range(10), lambda i: "a"))
    append(table_dir, rows(range(10, 20), lambda i: "b"))
    os.unlink(sorted(table_dir.rglob("*.parquet"))[0])  # as a VACUUM or a hand would
    with pytest.raises(TableError, match=r"version 1 of /Volumes/main/ml/raw/tables/v cannot be read: .*"
                                         r"export a later version, or restore the file"):
        export_delta(volume.path("tables/v"), volume.path("out/v"))
    assert current_export(volume.path("out/v")) is None
    assert [p.name for p in volume.local("out/v").iterdir()] == [EXPORTS]
    assert not list(volume.local("out").rglob("*.parquet"))


def test_current_export_names_the_current_folder_and_nothing_else(volume):
    append(volume.local("tables/c"), rows(range(10), lambda i: "a"))
    volume.write("plain/data.csv", "a\n")
    dest = volume.path("exports/c")
    r = export_delta(volume.path("tables/c"), dest)
    assert current_export(dest) == current_export(f"dbfs:{dest}/") == r.path
    for other in ("plain", "plain/data.csv", "nope", "exports", "tables/c"):
        assert current_export(volume.path(other)) is None
    assert current_export(r.path) is None  # the export's own folder is read as it is
    with pytest.raises(VolumePathError, match="not a Unity Catalog volume path"):
        current_export("/tmp/x")
    volume.write("weird/_air_export.json", "{}")
    with pytest.raises(VolumePathError, match="is not a pointer written by export_delta"):
        current_export(volume.path("weird"))


def test_a_destination_whose_export_is_gone_is_a_clear_error_until_exported_again(volume):
    append(volume.local("tables/m"), rows(range(10), lambda i: "a"))
    table, dest = volume.path("tables/m"), volume.path("exports/m")
    r = export_delta(table, dest)
    shutil.rmtree(local(r.path))
    with pytest.raises(VolumePathError, match=r"whose current export .* is missing .*: export the table to it again"):
        current_export(dest)
    again = export_delta(table, dest)
    assert not again.skipped and served(dest) == by_id(rows(range(10), lambda i: "a"))


def test_a_destination_of_the_earlier_link_layout_is_refused_with_what_to_remove(volume):
    append(volume.local("tables/l"), rows(range(10), lambda i: "a"))
    volume.write("exports/.l.exports/v0-3f9a1c2b0d4e/_air_export.json", json.dumps({"format": 1, "tag": "v0"}))
    os.symlink(".l.exports/v0-3f9a1c2b0d4e", volume.local("exports/l"))
    dest = volume.path("exports/l")
    for call in (lambda: current_export(dest), lambda: export_delta(volume.path("tables/l"), dest)):
        with pytest.raises(VolumePathError, match=r"earlier version of export_delta .*: remove "
                                                  r"/Volumes/main/ml/raw/exports/l and "
                                                  r"/Volumes/main/ml/raw/exports/.l.exports, then export again"):
            call()


def test_air_core_and_the_reader_contract_load_without_pyarrow_or_deltalake():
    code = ("import sys\n"
            "sys.modules['pyarrow'] = sys.modules['deltalake'] = None  # importing them fails\n"
            "import air_core\n"
            "from air_core.delta import ExportResult, TableError, current_export, export_delta\n"
            "assert air_core.export_delta is export_delta\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


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
    assert served(volume.path("exports/c")) == by_id(versions[1])
    again = run(volume.path("tables/c"), volume.path("exports/c"), "--version", "1", "--rows-per-file", "100")
    assert "already holds version 1" in again.out


# -- Spark Connect ------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local Spark Connect server for the session (its JVM lives until the process exits)."""
    if shutil.which("java") is None:
        pytest.skip("the Spark Connect tests need Java 17 (e.g. `apt-get install openjdk-17-jre-headless`)")
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
    ds = datasets.load_dataset("uc-volume", data_dir=current_export(dest), streaming=True, split="train")
    assert by_id(ds) == expected
    assert sorted(os.listdir(local(r.path))) == list(r.files)  # no _SUCCESS or checksums beside the Parquet
    assert spark.read.parquet(str(local(r.path))).count() == 500  # what a foreign reader is given

    again = export_delta("events", dest, spark=spark, rows_per_file=120)
    assert again.skipped and again.path == r.path
    spark_rows(spark, 600).write.mode("overwrite").partitionBy("split").saveAsTable("events")
    newer = export_delta("events", dest, spark=spark, rows_per_file=120)
    assert (newer.rows, newer.skipped) == (600, False) and newer.path != r.path
    assert served(dest) == by_id(rows(range(600), lambda i: "test" if i % 3 == 0 else "train"))

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
