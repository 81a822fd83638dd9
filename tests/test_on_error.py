"""A file that stays unreadable: a clear error naming it, or with on_error="skip" left out, on every front door.

Faults come from netvol (`NETVOL_FAIL_MATCH`: every open of one file fails;
`NETVOL_FAIL_PCT`: transient failures) in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from air_core import FileStream, run_state
from air_core.io.files import Skipped, without_skips

SCRIPT = Path(__file__).parent / "scripts" / "doors_under_faults.py"
BAD = "class1/f00004.bin"


def read_through(door: str, volume, netvol_so, tmp_path, on_error: str, **faults: str) -> dict:
    out = tmp_path / f"{door}.json"
    env = {**os.environ, "LD_PRELOAD": netvol_so, "NETVOL_PREFIX": f"{volume.root}/", "NETVOL_OPEN_MS": "1",
           "NETVOL_MBPS": "0", "PYTHONPATH": str(Path(__file__).parent.parent), **faults}
    proc = subprocess.run([sys.executable, str(SCRIPT), door, volume.path("d"), str(out), on_error], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("door", ["stream", "hf", "ray", "torch"])
def test_an_unreadable_file_fails_clearly_or_is_skipped_and_the_rest_arrive_once(volume, netvol_so, tmp_path,
                                                                                 door):
    paths = volume.files("d", 24)
    raised = read_through(door, volume, netvol_so, tmp_path, "raise", NETVOL_FAIL_MATCH=BAD)
    assert f"cannot read {volume.path('d/' + BAD)} after 10 attempts" in raised["error"]
    skipped = read_through(door, volume, netvol_so, tmp_path, "skip", NETVOL_FAIL_MATCH=BAD)
    assert skipped["error"] is None
    assert sorted(skipped["names"]) == sorted(p.rsplit("/", 1)[1] for p in paths if not p.endswith(BAD))


@pytest.mark.slow
@pytest.mark.parametrize("door", ["hf", "ray", "torch"])
def test_transient_errors_through_every_front_door_deliver_every_file_once(volume, netvol_so, tmp_path, door):
    paths = volume.files("d", 120)
    got = read_through(door, volume, netvol_so, tmp_path, "raise", NETVOL_FAIL_PCT="5", NETVOL_SEED="3")
    assert got["error"] is None and sorted(got["names"]) == sorted(p.rsplit("/", 1)[1] for p in paths)


@pytest.fixture
def unreadable(monkeypatch):
    """Every copy of a file whose path ends with BAD fails with EIO (retries without waiting)."""
    import errno

    from air_core.io import cache as cache_mod, fetch

    real = cache_mod.copy_into

    def copy_into(source, volume_path, *args, **kwargs):
        if volume_path.endswith(BAD):
            raise OSError(errno.EIO, "Input/output error")
        return real(source, volume_path, *args, **kwargs)

    monkeypatch.setattr(cache_mod, "copy_into", copy_into)
    monkeypatch.setattr(fetch.time, "sleep", lambda s: None)


def test_a_skipped_file_is_in_the_state_and_a_resume_neither_delivers_nor_reads_it(volume, unreadable):
    paths = volume.files("d", 30)
    stream = FileStream(volume.path("d"), on_error="skip", shuffle=True, seed=1)
    got, it = [], iter(stream)
    while len(stream.skipped) == 0:
        got.append(next(it).path)
    state = stream.state_dict()
    assert state["skipped"] == [volume.path("d/" + BAD)]
    it.close()
    again = FileStream(volume.path("d"), on_error="raise", shuffle=True, seed=1)  # would raise if it met the file
    again.load_state_dict(state)
    got += [f.path for f in again]
    assert sorted(got) == [p for p in paths if not p.endswith(BAD)]


def test_with_equalize_a_skipped_file_is_stood_in_for_so_ranks_keep_equal_counts(volume, unreadable):
    volume.files("d", 31)
    streams = [FileStream(volume.path("d"), on_error="skip", equalize="pad", rank=r, world_size=2) for r in range(2)]
    got = [[f.path for f in s] for s in streams]
    assert len(got[0]) == len(got[1]) == 16
    assert sum(s.skipped == [volume.path("d/" + BAD)] for s in streams) == 1
    assert volume.path("d/" + BAD) not in got[0] + got[1]
    gathered = run_state([s.state_dict() for s in streams])
    assert gathered["epoch"] == 0


def test_without_skips_stands_in_for_a_skipped_file_only_when_counts_must_stay_equal():
    bad = Skipped("/Volumes/c/s/v/x", 9, "EIO")
    assert list(without_skips(["a", bad, "b"], keep_count=False)) == ["a", "b"]
    assert list(without_skips(["a", bad, "b"], keep_count=True)) == ["a", "a", "b"]
    assert list(without_skips([bad, bad, "c"], keep_count=True)) == ["c"] * 3
