"""The air-data command: demo and stage, run as a user runs them."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from air_core.io.stage import stage
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
def test_a_killed_stage_leaves_no_torn_file_under_a_visible_name(volume, netvol_so, tmp_path):
    data = os.urandom(3 << 20)
    volume.write("d/big.bin", data)
    volume.files("d/small", 5)
    dst = tmp_path / "local"
    env = {**os.environ, "LD_PRELOAD": netvol_so, "NETVOL_PREFIX": str(volume.root) + "/", "NETVOL_MBPS": "1"}
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


# -- air-data cache ----------------------------------------------------------------------------------

def cached(volume, n: int, **options) -> Path:
    """A node cache holding n files, read through a stream made with `options`; returns its folder."""
    from air_core import FileStream

    volume.files("c", n)
    assert len(list(FileStream(volume.path("c"), **options))) == n
    return Path(os.environ["AIR_CACHE_DIR"])


def entries(root: Path) -> list[Path]:
    return [p for p in (root / "objects").rglob("*") if p.is_file() and not p.name.startswith(".")]


def age(paths, hours: float) -> None:
    t = os.path.getmtime(paths[0]) - hours * 3600
    for p in paths:
        os.utime(p, (t, os.path.getmtime(p)))


def test_cache_info_says_what_the_cache_holds(volume, capsys):
    from air_core.cli import main

    root = cached(volume, 12)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"folder: {root}" in out and "entries: 12\n" in out and "not kept here" in out
    assert "damaged copies found: 0 " in out


def test_cache_prune_removes_what_went_unused_and_spares_the_last_hour(volume, capsys):
    from air_core.cli import main

    root = cached(volume, 10)
    old = sorted(entries(root))[:4]
    age(old, 48)
    assert main(["cache", "prune", "--older-than", "1d"]) == 0
    assert sorted(entries(root)) == sorted(set(entries(root)) - set(old)) and len(entries(root)) == 6
    age(entries(root), 0.1)  # used a few minutes ago: in use, whatever the cap
    assert main(["cache", "prune", "--limit", "1"]) == 0
    assert len(entries(root)) == 6
    assert main(["cache", "prune"]) == 2
    assert "needs --older-than" in capsys.readouterr().err


def test_cache_prune_to_a_size_removes_the_least_recently_used_first(volume):
    from air_core.cli import main

    root = cached(volume, 8)
    by_use = sorted(entries(root))
    for k, p in enumerate(by_use):  # entry k was last used 30 - k hours ago: the last ones most recently
        os.utime(p, (os.path.getmtime(p) - (30 - k) * 3600, os.path.getmtime(p)))
    keep = sum(p.stat().st_size for p in by_use[-3:])
    assert main(["cache", "prune", "--limit", str(keep)]) == 0
    assert sorted(entries(root)) == by_use[-3:]


def test_cache_clear_removes_entries_and_listings_but_never_a_folder_that_is_no_cache(volume, tmp_path, capsys):
    from air_core.cli import main

    root = cached(volume, 5)
    assert main(["cache", "clear"]) == 0
    assert entries(root) == [] and not (root / "manifests").exists()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    assert main(["cache", "clear", "--cache-dir", str(tmp_path / "home")]) == 2
    assert "holds no node cache" in capsys.readouterr().err
    assert (tmp_path / "home" / "notes.txt").read_text() == "mine"


def test_cache_verify_reports_copies_whose_bytes_changed_and_repair_removes_them(volume, capsys):
    from air_core import FileStream
    from air_core.cli import main
    from test_cache import flip_a_byte

    root = cached(volume, 6, verify=True)  # copies that record their checksums
    assert main(["cache", "verify"]) == 0
    assert "checked 6 of 6 entries" in capsys.readouterr().out
    changed, cut = sorted(entries(root))[:2]
    flip_a_byte(changed, at=50)  # the same length: only the checksum tells
    os.truncate(cut, 10)
    assert main(["cache", "verify"]) == 1
    out = capsys.readouterr().out
    assert f"damaged: {changed}\n" in out and f"damaged: {cut}\n" in out and ": 2 damaged\n" in out
    assert len(entries(root)) == 6  # reported, left in place
    assert main(["cache", "verify", "--repair"]) == 0
    assert "2 damaged, removed" in capsys.readouterr().out and len(entries(root)) == 4
    assert main(["cache", "info"]) == 0
    assert "damaged copies found: 2 " in capsys.readouterr().out
    stream = FileStream(volume.path("c"), verify=True)
    assert {f.path: f.read_bytes() for f in stream} == {
        volume.path(str(p.relative_to(volume.local_vol))): p.read_bytes() for p in volume.local("c").rglob("*.bin")}
    assert stream.cache.stats.misses == 2 and main(["cache", "verify"]) == 0


def test_cache_commands_refuse_another_users_cache(volume, tmp_path, capsys):
    from air_core.cli import main

    if os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    root = cached(volume, 3)
    os.chown(root, 12345, 12345)
    try:
        assert main(["cache", "clear"]) == 2
        assert "belongs to another user" in capsys.readouterr().err
        assert len(entries(root)) == 3
    finally:
        os.chown(root, 0, 0)


def test_a_size_means_the_same_to_every_command():
    from argparse import ArgumentTypeError

    from air_core.cli import size
    from air_core.sizes import parse_size

    # SI units are decimal, IEC units and bare letters binary: `cache prune --limit` and `pack --shard-size` agree.
    for text, expected in (("1GB", 10**9), ("1GiB", 1 << 30), ("1G", 1 << 30), ("500MB", 5 * 10**8),
                           ("64k", 1 << 16), ("4096", 4096)):
        assert size(text) == parse_size(text) == expected
    with pytest.raises(ArgumentTypeError, match="GB = 10\\^9 bytes"):
        size("lots")
