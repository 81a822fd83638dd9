"""The air-data command: demo and stage, run as a user runs them."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from air_core.stage import stage
from conftest import wait_for

AIR_DATA = [sys.executable, "-m", "air_core.cli"]


@pytest.mark.slow
def test_demo_streams_caches_and_shows_the_split(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("AIR_VOLUMES_ROOT", "AIR_CACHE_DIR")}
    out = subprocess.run([*AIR_DATA, "demo", "--workdir", str(tmp_path), "--world-size", "3"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "epoch 1:" in out.stdout and "cache hits 300/300" in out.stdout
    assert "rank 2: worker 0:" in out.stdout
    for section in ("== delta ==", "== hf ==", "== ray =="):
        assert section in out.stdout
    assert "again: nothing written" in out.stdout
    assert (tmp_path / "Volumes" / "demo" / "ml" / "raw" / "images" / "cat").is_dir()


def test_stage_copies_once_and_skips_what_is_there(volume, tmp_path):
    volume.files("d", 25)
    dst = tmp_path / "local"
    out = subprocess.run([*AIR_DATA, "stage", volume.path("d"), str(dst), "-j", "8"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "copied 25 files" in out.stdout
    for p in volume.local("d").rglob("*.bin"):
        assert (dst / p.relative_to(volume.local("d"))).read_bytes() == p.read_bytes()
    again = stage(volume.path("d"), str(dst))
    assert (again.copied, again.skipped) == (0, 25)
    assert not list(Path(dst).rglob("*.part"))


@pytest.mark.slow
def test_a_killed_stage_leaves_no_torn_file_under_a_visible_name(volume, slowvol_so, tmp_path):
    data = os.urandom(3 << 20)
    volume.write("d/big.bin", data)
    volume.files("d/small", 5)
    dst = tmp_path / "local"
    env = {**os.environ, "LD_PRELOAD": slowvol_so, "SLOWVOL_PREFIX": str(volume.root) + "/", "SLOWVOL_MBPS": "1"}
    proc = subprocess.Popen([*AIR_DATA, "stage", volume.path("d"), str(dst)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: proc.poll() is not None or any(p.name.endswith(".part") and p.stat().st_size
                                                     for p in dst.rglob("*")), 30, "the copy to start")
    assert proc.poll() is None, "the copy ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    source = volume.local("d")
    visible = [p for p in dst.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert all(p.read_bytes() == (source / p.relative_to(dst)).read_bytes() for p in visible)
    assert "big.bin" not in {p.name for p in visible}  # the torn copy hides as .big.bin.<pid>.part
    again = stage(volume.path("d"), str(dst))
    assert again.copied == 6 - len(visible) and (dst / "big.bin").read_bytes() == data


def test_bad_input_is_one_clear_line(volume, tmp_path):
    out = subprocess.run([*AIR_DATA, "stage", "/data/x", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.startswith("air-data stage: '/data/x' is not a Unity Catalog volume path")
    assert "Traceback" not in out.stderr
