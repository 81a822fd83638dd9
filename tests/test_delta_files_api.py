"""export_delta onto a volume reached over the Databricks Files API: parts staged on local disk, PUT whole,
the pointer last; reuse, the grace period and the sweep through the transport; kills; the front doors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("databricks.sdk")
pytest.importorskip("deltalake")

import air_core  # noqa: E402
from air_core.delta import TableError, current_export, export_delta, publication  # noqa: E402
from air_core.delta.publication import EXPORTS, POINTER  # noqa: E402
from air_core.errors import EmptyVolumeError, OptionError  # noqa: E402
from deltalake import write_deltalake  # noqa: E402

KILLED = Path(__file__).parent / "scripts" / "delta_export_killed.py"
SCHEMA = pa.schema([("id", pa.int64()), ("text", pa.string()), ("split", pa.string())])


def rows(ids) -> list[dict]:
    return [{"id": i, "text": f"row {i}", "split": "ab"[i % 2]} for i in ids]


def append(table: Path, ids) -> None:
    write_deltalake(str(table), pa.Table.from_pylist(rows(ids), schema=SCHEMA), partition_by=["split"],
                    mode="append")


def by_id(table_rows) -> list[dict]:
    return sorted(({k: r[k] for k in ("id", "text", "split")} for r in table_rows), key=lambda r: r["id"])


@pytest.fixture
def stage_dir(tmp_path, monkeypatch) -> Path:
    """The node's temp dir, where exports stage their parts (and take their node lock)."""
    folder = tmp_path / "node-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def staged(stage_dir: Path) -> list[str]:
    """What exports left in the temp dir apart from their node locks."""
    return [p.name for p in stage_dir.iterdir() if not p.name.startswith("air-export-locks-")]


def put_names(server) -> list[str]:
    return [r.path.rsplit("/", 1)[1] for r in server.requests("PUT", "files")]


def exports_of(v, dest_rel: str) -> set[str]:
    return {p.name for p in (v.local(dest_rel) / EXPORTS).iterdir()}


def test_an_export_over_files_api_is_whole_object_puts_with_the_pointer_last(files_api, tmp_path, stage_dir):
    import datasets

    import air_hf  # noqa: F401

    v, s = files_api, files_api.server
    table = tmp_path / "tables" / "t"
    append(table, range(300))
    dest = v.path("exports/t")
    s.clear_trace()
    r = export_delta(str(table), dest, rows_per_file=50, rows_per_row_group=25)
    assert (r.rows, r.version, r.skipped, len(r.files)) == (300, 0, False, 6)
    puts = put_names(s)
    assert sorted(puts[:-1]) == list(r.files) and puts[-1] == POINTER  # each part once, the pointer last
    part_puts = [q for q in s.requests("PUT", "files") if q.path.endswith(".parquet")]
    assert {q.path for q in part_puts} == {f"{r.path}/{f}" for f in r.files}
    assert not [q for q in s.trace if q.method == "PUT" and q.endpoint == "files"
                and os.path.basename(q.path)[0] == "."]  # no hidden name to rename: a PUT is whole
    assert staged(stage_dir) == []  # the staging folder is gone
    assert current_export(dest) == r.path
    expected = by_id(rows(range(300)))
    assert by_id(air_core.RowStream(dest)) == expected
    ds = datasets.load_dataset("uc-volume", data_dir=dest, split="train", streaming=True)
    assert by_id(ds) == expected
    pointer = json.loads(v.local(f"exports/t/{POINTER}").read_text())
    assert pointer["files"] == list(r.files) and pointer["rows"] == 300


def test_the_same_version_again_makes_no_put_and_a_newer_one_retires_it(files_api, tmp_path, stage_dir):
    v, s = files_api, files_api.server
    table = tmp_path / "t"
    append(table, range(40))
    dest = v.path("exports/t")
    first = export_delta(str(table), dest)
    s.clear_trace()
    again = export_delta(str(table), dest)
    assert again.skipped and again.path == first.path and again.files == first.files
    assert [q for q in s.trace if q.method in ("PUT", "DELETE")] == []
    append(table, range(40, 70))
    second = export_delta(str(table), dest)
    assert (second.version, second.rows, second.skipped) == (1, 70, False)
    assert exports_of(v, "exports/t") == {os.path.basename(first.path), os.path.basename(second.path)}  # kept
    assert by_id(air_core.RowStream(first.path)) == by_id(rows(range(40)))  # for readers still on it
    assert by_id(air_core.RowStream(dest)) == by_id(rows(range(70)))
    assert staged(stage_dir) == []


def test_the_grace_period_and_the_sweep_work_through_the_transport(files_api, tmp_path, monkeypatch):
    v, s = files_api, files_api.server
    table = tmp_path / "t"
    append(table, range(10))
    dest = v.path("exports/g")
    v0 = export_delta(str(table), dest)
    append(table, range(10, 20))
    v1 = export_delta(str(table), dest)  # v0 retired now, kept for its grace period
    long_ago = time.time() - 60
    killed = f"v9-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(long_ago))}-0a0a0a0a0a0a"
    part = v.write(f"exports/g/{EXPORTS}/{killed}/part-0a0a0a0a0a0a-0.parquet", "half")  # a killed export's
    os.utime(part, (long_ago, long_ago))
    running = f"v9-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(long_ago))}-0c0c0c0c0c0c"
    v.write(f"exports/g/{EXPORTS}/{running}/part-0c0c0c0c0c0c-0.parquet", "being written")  # another node's
    later = time.time() + publication.GRACE_SECONDS + 1  # v0 has been retired for longer than the grace period
    os.utime(v.local(f"exports/g/{EXPORTS}/{running}/part-0c0c0c0c0c0c-0.parquet"), (later, later))  # still written
    append(table, range(20, 30))
    s.clear_trace()
    monkeypatch.setattr(publication, "clock", lambda: later)
    v2 = export_delta(str(table), dest)
    names = {os.path.basename(p) for p in (v1.path, v2.path)}
    assert exports_of(v, "exports/g") == names | {running}
    deleted = {q.path for q in s.requests("DELETE", "files")}
    assert f"{v0.path}/{v0.files[0]}" in deleted and f"{dest}/{EXPORTS}/{killed}/part-0a0a0a0a0a0a-0.parquet" in deleted
    assert put_names(s)[-1] == POINTER and by_id(air_core.RowStream(dest)) == by_id(rows(range(30)))


def test_a_failed_export_leaves_nothing_on_the_volume_nor_on_local_disk(files_api, tmp_path, stage_dir):
    v = files_api
    table = tmp_path / "t"
    append(table, range(10))
    append(table, range(10, 20))
    os.unlink(sorted(table.rglob("*.parquet"))[0])
    dest = v.path("exports/b")
    with pytest.raises(TableError, match="cannot be read"):
        export_delta(str(table), dest)
    assert current_export(dest) is None and list((v.local("exports/b") / EXPORTS).iterdir()) == []
    assert staged(stage_dir) == []


def part_writer(count: int, most: list[int]):
    """An engine's `write` to the Snapshot contract, a one-row part at a time: it asks `wanted()` before
    each and says when it is `finished` (pyarrow's writer would queue a table this small whole)."""
    def write(folder: str, token: str, parts: publication.Parts) -> int:
        os.makedirs(folder)
        written = 0
        while written < count and parts.wanted():
            path = os.path.join(folder, f"part-{token}-{written}.parquet")
            pq.write_table(pa.table({"id": [written]}), path)
            parts.finished(path)
            written += 1
            most[0] = max(most[0], len([n for n in os.listdir(folder) if n.endswith(".parquet")]))
        return written

    return publication.Snapshot({"engine": "test", "table": "t", "version": 0}, write)


def test_an_engine_faster_than_the_uploads_waits_with_few_parts_on_local_disk(files_api, stage_dir):
    v, s = files_api, files_api.server
    s.faults.latency_s = 0.02  # every request: a part is written far faster than it is put
    most = [0]
    r = publication.Destination(v.path("exports/s")).publish(part_writer(40, most))
    assert len(r.files) == 40 and r.rows == 40
    assert most[0] == publication._STAGED + 1  # those uploading or waiting to, and the one just written
    assert staged(stage_dir) == []


def test_an_upload_that_fails_stops_the_engine_early(files_api, tmp_path, stage_dir):
    v, s = files_api, files_api.server
    s.faults.count, s.faults.match, s.faults.retry_after = 10**6, ".parquet", 0.001  # every part's PUT: 503
    with pytest.raises(OSError, match="503"):
        publication.Destination(v.path("exports/f")).publish(part_writer(200, [0]))
    tried = {q.path for q in s.requests("PUT", "files") if q.path.endswith(".parquet")}
    assert 0 < len(tried) <= publication._STAGED + 2  # the engine stopped: not every part was written
    assert current_export(v.path("exports/f")) is None and staged(stage_dir) == []


def test_the_deltalake_engine_writes_no_more_rows_once_the_export_has_failed(tmp_path):
    from air_core.delta import deltalake_engine

    table = tmp_path / "t"
    for k in range(0, 400, 40):
        append(table, range(k, k + 40))

    class FailsAtOnce(publication.Parts):
        def wanted(self) -> bool:
            return False

    snapshot = deltalake_engine.snapshot(str(table), None, 20, 20, False)
    assert snapshot.write(str(tmp_path / "out"), "x", FailsAtOnce()) == 0
    assert snapshot.write(str(tmp_path / "all"), "y", publication.Parts()) == 400


def test_the_front_doors_export_over_files_api(files_api, tmp_path):
    import datasets

    import air_hf  # noqa: F401

    v, s = files_api, files_api.server
    table = tmp_path / "t"
    append(table, range(60))
    append(table, range(60, 90))
    dest = v.path("exports/d")
    ds = datasets.load_dataset("uc-volume", delta_table=str(table), delta_version=0, data_dir=dest, split="train",
                               streaming=True)
    assert by_id(ds) == by_id(rows(range(60)))
    s.clear_trace()
    again = datasets.load_dataset("uc-volume", delta_table=str(table), delta_version=0, data_dir=dest,
                                  split="train", streaming=True)
    assert by_id(again) == by_id(rows(range(60))) and s.requests("PUT") == []  # the export reused
    latest = datasets.load_dataset("uc-volume", delta_table=str(table), data_dir=dest, split="train", streaming=True)
    assert by_id(latest) == by_id(rows(range(90)))


def test_what_cannot_run_over_files_api_says_what_to_do(files_api, tmp_path):
    v = files_api
    table = tmp_path / "t"
    append(table, range(5))
    with pytest.raises(OptionError, match="spark= .*Files API: leave spark unset"):
        export_delta("main.ml.t", v.path("exports/s"), spark=object())
    v.local("tables").mkdir()
    os.rename(table, v.local("tables/t"))  # the table on the volume: deltalake cannot read it over HTTP
    with pytest.raises(TableError, match="over the Files API.*where the volume is mounted"):
        export_delta(v.path("tables/t"), v.path("exports/s"))
    assert not v.local("exports/s").exists()


def _kill_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent.parent),
                                                                       os.environ.get("PYTHONPATH")]))}


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [0, 3, 8])  # before any PUT, amid the parts, just before the pointer
def test_an_export_killed_mid_upload_never_serves_half_an_export(files_api, tmp_path, kill_at):
    v = files_api
    table = tmp_path / "t"
    append(table, range(100))
    append(table, range(100, 400))
    old_dest, new_dest = v.path("exports/k"), v.path("exports/fresh")
    old = export_delta(str(table), old_dest, version=0)
    for dest in (old_dest, new_dest):
        died = subprocess.run([sys.executable, str(KILLED), str(table), dest, "50", "25", str(kill_at)],
                              env=_kill_env(), capture_output=True, text=True, timeout=240)
        assert died.returncode == -signal.SIGKILL, died.stderr[-3000:]  # 8 parts and a pointer: 9 PUTs
    assert current_export(old_dest) == old.path  # the previous export, whole
    assert by_id(air_core.RowStream(old_dest)) == by_id(rows(range(100)))
    assert current_export(new_dest) is None
    with pytest.raises(EmptyVolumeError):  # nothing served: a clear error, never a half-export's rows
        list(air_core.RowStream(new_dest))
    done = export_delta(str(table), new_dest, rows_per_file=50, rows_per_row_group=25)
    assert (done.rows, done.skipped) == (400, False) and by_id(air_core.RowStream(new_dest)) == by_id(rows(range(400)))
    assert len(exports_of(v, "exports/fresh")) == (2 if kill_at else 1)  # a killed one's folder waits out its grace


@pytest.mark.slow
def test_ray_exports_over_files_api_with_delta_table(files_api, tmp_path, ray_cluster):
    v, s = files_api, files_api.server
    table = tmp_path / "t"
    append(table, range(500))
    dest = v.path("exports/ray")
    env = {**_kill_env(), "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    env.pop("AIR_VOLUMES_ROOT", None)
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "scripts" / "ray_delta_files_api.py"),
                           str(table), dest], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [list(range(500))] * 2
    puts = put_names(s)
    assert puts[-1] == POINTER and puts.count(POINTER) == 1  # exported once, the second read reused it
    assert {q.path for q in s.requests("GET", "files") if q.path.endswith(".parquet")} == {
        f"{current_export(dest)}/{f}" for f in json.loads(v.local(f"exports/ray/{POINTER}").read_text())["files"]}
