"""air_ray.local_path(row) where volumes are reached over the Files API: no FUSE path to stat or to fall back on."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("databricks.sdk")
pytest.importorskip("ray")

import air_ray  # noqa: E402
from air_core.errors import FetchError  # noqa: E402
from air_ray import UCVolumeDatasource  # noqa: E402


def _a_row(v) -> dict:
    return next(r for t in UCVolumeDatasource(v.path("d")).get_read_tasks(1) for b in t() for r in b.to_pylist())


def test_a_row_read_on_another_node_is_fetched_over_the_files_api(files_api, tmp_path):
    v, s = files_api, files_api.server
    v.files("d", 3)
    row = _a_row(v)
    want = v.local(row["path"][len(v.vol) + 1:]).read_bytes()
    assert air_ray.local_path(row) == row["local_path"]  # the node that read it: as it is
    # On another node the row's copy is not there: this node's cache gets one, through the server.
    moved = {**row, "local_path": str(tmp_path / "other-node" / Path(row["local_path"]).name)}
    elsewhere = str(tmp_path / "this-node-cache")
    s.clear_trace()
    copy = air_ray.local_path(moved, cache_dir=elsewhere)
    assert copy.startswith(elsewhere) and Path(copy).read_bytes() == want
    assert [r.path for r in s.requests("GET", "files")] == [row["path"]]
    s.clear_trace()
    assert air_ray.local_path(moved, cache_dir=elsewhere) == copy
    assert s.requests("GET", "files") == []  # the second time from this node's cache
    v.local(row["path"][len(v.vol) + 1:]).write_bytes(b"new contents")
    with pytest.raises(FetchError, match="changed on the volume"):
        air_ray.local_path(moved, cache_dir=str(tmp_path / "c3"))


def test_past_a_full_cache_over_the_files_api_says_what_to_do(files_api, tmp_path, monkeypatch):
    v = files_api
    v.files("d", 1)
    row = _a_row(v)
    moved = {**row, "local_path": str(tmp_path / "other-node" / Path(row["local_path"]).name)}
    total = shutil.disk_usage("/").total
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=total, used=total, free=0))
    # No local file holds the volume's file over the Files API, so no path can be given.
    with pytest.raises(FetchError, match="is full.*row's `bytes`"):
        air_ray.local_path(moved, cache_dir=str(tmp_path / "full"))
