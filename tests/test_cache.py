"""The node cache under real processes: fetch once, crash-safe, versioned, capped, private."""

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from air_core import FetchError, FileStream, OptionError
from air_core.io.cache import Cache
from conftest import wait_for

SCRIPT = Path(__file__).parent / "scripts" / "core_read_all.py"
LONG = 40 << 20  # bytes the cache copies in ranges of their own (16 MiB each, from 32 MiB), each its own open


def slow_env(so, volume, trace=None, **extra):
    env = {**os.environ, "LD_PRELOAD": so, "NETVOL_PREFIX": str(volume.root) + "/",
           "NETVOL_OPEN_MS": "10", "NETVOL_MBPS": "200", **extra}
    if trace:
        env["NETVOL_TRACE"] = str(trace)
    return env


def opens(trace: Path) -> Counter:
    return Counter(line.split(" ", 1)[1].strip() for line in trace.read_text().splitlines()
                   if line.startswith("open "))


@pytest.mark.slow
def test_four_processes_fetch_each_file_once(volume, netvol_so, tmp_path):
    paths = volume.files("d", 120, size=lambda i: 2000 + i)
    trace = tmp_path / "trace"
    env = slow_env(netvol_so, volume, trace)
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), volume.path("d"), str(seed)], env=env,
                              stdout=subprocess.PIPE, text=True) for seed in range(4)]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    counts = opens(trace)
    assert len(counts) == 120 and set(counts.values()) == {1}, counts.most_common(3)
    assert sum(r["misses"] for r in results) == 120
    assert all(r["bytes"] == sum(2000 + i for i in range(120)) for r in results)
    assert len(paths) == 120


@pytest.mark.slow
def test_second_epoch_never_touches_the_volume(volume, netvol_so, tmp_path):
    volume.files("d", 40)
    trace = tmp_path / "trace"
    code = ("import sys; from air_core import FileStream\n"
            "s = FileStream(sys.argv[1])\n"
            "a = [f.read_bytes() for f in s]; print('EPOCH2', flush=True)\n"
            "b = [f.read_bytes() for f in s]; assert a == b; print(s.cache.stats)\n")
    out = subprocess.run([sys.executable, "-c", code, volume.path("d")], env=slow_env(netvol_so, volume, trace),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "hits=40, misses=40" in out.stdout
    assert sum(opens(trace).values()) == 40


@pytest.mark.slow
def test_kill_during_fetch_never_serves_a_partial_file(volume, netvol_so, tmp_path):
    data = os.urandom(3 << 20)
    volume.write("big/blob.bin", data)
    code = "import sys; from air_core import FileStream\nfor f in FileStream(sys.argv[1]): pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code, volume.path("big")],
                            env=slow_env(netvol_so, volume, NETVOL_MBPS="1"))
    cache_objects = Path(os.environ["AIR_CACHE_DIR"]) / "objects"
    wait_for(lambda: proc.poll() is not None or any(p.name.endswith(".part") and p.stat().st_size
                                                     for p in cache_objects.rglob("*")), 30, "the fetch to start")
    assert proc.poll() is None, "the fetch ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    served = [p for p in cache_objects.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert served == []  # only the .part is left, and it is never a cache entry
    stream = FileStream(volume.path("big"))
    (f,) = list(stream)
    assert f.cached and f.read_bytes() == data
    assert stream.cache.stats.misses == 1


def test_a_changed_file_is_fetched_again(volume):
    volume.write("d/a.txt", "old")
    (first,) = list(FileStream(volume.path("d")))
    assert first.read_bytes() == b"old"
    time.sleep(0.01)
    volume.write("d/a.txt", "newer")
    stream = FileStream(volume.path("d"))
    (second,) = list(stream)
    assert second.read_bytes() == b"newer" and second.local_path != first.local_path
    assert stream.cache.stats.misses == 1


def test_a_file_changed_after_listing_is_a_clear_error(volume):
    volume.write("d/a.txt", "old")
    stream = FileStream(volume.path("d"))
    volume.write("d/a.txt", "different size")
    with pytest.raises(FetchError, match="changed after it was listed"):
        list(stream)
    os.unlink(volume.local("d/a.txt"))
    with pytest.raises(FetchError, match=r"cannot read /Volumes/main/ml/raw/d/a\.txt"):
        list(stream)


def test_the_cap_holds_and_cycling_epochs_do_not_thrash(volume):
    volume.files("d", 50, size=lambda i: 1000)
    stream = FileStream(volume.path("d"), cache_limit=20_000, shuffle=True)
    hits = []
    for epoch in range(3):
        stream.set_epoch(epoch)
        before = stream.cache.stats.hits
        got = {f.path: f.read_bytes() for f in stream}
        assert all(got[p] == volume.local(p[len(volume.vol) + 1:]).read_bytes() for p in got)
        assert stream.cache.usage() <= 20_000
        hits.append(stream.cache.stats.hits - before)
    assert hits == [0, 20, 20]  # frozen once full: every later epoch hits what was admitted
    assert stream.cache.stats.not_admitted == 30 * 3


def test_prune_lowers_an_over_cap_cache_but_spares_entries_in_use(volume):
    volume.files("d", 10, size=lambda i: 1000)
    list(FileStream(volume.path("d")))
    root = Path(os.environ["AIR_CACHE_DIR"])
    entries = [p for p in (root / "objects").rglob("*") if p.is_file()]
    old = time.time() - 7200
    for p in entries[:6]:
        os.utime(p, (old, old))
    cache = Cache(str(root), limit_bytes=3500)  # over its cap: prunes on open
    left = [p for p in (root / "objects").rglob("*") if p.is_file()]
    assert len(left) == 4 and cache.usage() == 4000  # the 4 recently used stay, over cap


def test_cache_is_private(volume, tmp_path):
    volume.files("d", 3)
    root = tmp_path / "cache"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    files = list(FileStream(volume.path("d")))
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for f in files:
        assert stat.S_IMODE(os.stat(f.local_path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(f.local_path)).st_mode) == 0o700


def test_a_cache_folder_of_another_user_is_refused(tmp_path):
    if os.getuid() != 0:
        pytest.skip("needs root to give the folder away")
    other = tmp_path / "theirs"
    other.mkdir(mode=0o700)
    os.chown(other, 65534, 65534)
    with pytest.raises(OptionError, match="belongs to another user"):
        Cache(str(other))


@pytest.mark.slow
def test_a_large_file_arrives_whole_through_concurrent_ranges(volume, netvol_so, tmp_path):
    # 70 MiB: five 16 MiB ranges, each through its own open of the volume file.
    data = os.urandom(1 << 20) * 70
    volume.write("big/table.parquet", data)
    trace = tmp_path / "trace"
    code = ("import sys; from air_core import FileStream; "
            "[print(f.local_path) for f in FileStream(sys.argv[1])]")
    out = subprocess.run([sys.executable, "-c", code, volume.path("big")], env=slow_env(netvol_so, volume, trace),
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert Path(out[0]).read_bytes() == data
    assert opens(trace)[str(volume.local("big/table.parquet"))] == 5


def test_a_range_entry_holds_those_bytes_and_is_kept_counted_and_cleared_like_a_file(volume):
    data = os.urandom(LONG + 1000)
    src = volume.write("d/shard.parquet", data)
    vpath, st = volume.path("d/shard.parquet"), src.stat()
    cache = Cache(os.environ["AIR_CACHE_DIR"], limit_bytes=3 * LONG)
    entry = cache.get(str(src), vpath, st.st_size, st.st_mtime_ns, (1000, 5000))
    assert Path(entry).read_bytes() == data[1000:5000]
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o600
    assert cache.lookup(vpath, st.st_size, st.st_mtime_ns, (1000, 5000)) == entry
    assert cache.lookup(vpath, st.st_size, st.st_mtime_ns) is None  # the whole file is another entry
    assert cache.lookup(vpath, st.st_size, st.st_mtime_ns + 1, (1000, 5000)) is None  # so is another version
    long = cache.get(str(src), vpath, st.st_size, st.st_mtime_ns, (500, 500 + LONG))  # copied in ranges
    assert Path(long).read_bytes() == data[500:500 + LONG]
    assert cache.stats.misses == 2 and cache.stats.bytes_fetched == 4000 + LONG
    assert cache.usage() == 4000 + LONG and cache.info()["entries"] == 2
    with pytest.raises(OptionError, match="not a range of it"):
        cache.get(str(src), vpath, st.st_size, st.st_mtime_ns, (5000, len(data) + 1))
    assert cache.clear() == 4000 + LONG and cache.info()["entries"] == 0


def test_a_failed_range_copy_leaves_nothing_to_serve(volume, monkeypatch):
    data = os.urandom(20_000)
    src = volume.write("d/shard.parquet", data)
    vpath, st = volume.path("d/shard.parquet"), src.stat()
    cache = Cache(os.environ["AIR_CACHE_DIR"], limit_bytes=1 << 20)
    real = os.sendfile

    def half(out, in_, offset, count):  # the volume gives up half way through the range
        return 0 if offset >= 5000 else real(out, in_, offset, min(count, 5000 - offset))

    monkeypatch.setattr(os, "sendfile", half)
    with pytest.raises(FetchError, match="changed while being read"):
        cache.get(str(src), vpath, st.st_size, st.st_mtime_ns, (1000, 9000))
    assert list((Path(cache.root) / "objects").rglob("*.*")) == [] and cache.usage() == 0  # no entry, no .part
    monkeypatch.setattr(os, "sendfile", real)
    assert Path(cache.get(str(src), vpath, st.st_size, st.st_mtime_ns, (1000, 9000))).read_bytes() == data[1000:9000]


# -- a copy is checked before it is served ------------------------------------------------------------

def copies(cache_root) -> list[Path]:
    return sorted(p for p in (Path(cache_root) / "objects").rglob("*") if p.is_file() and not p.name.startswith("."))


def flip_a_byte(path: Path, at: int = 0) -> None:
    """Change one byte in place: the copy keeps its length, so only its checksum tells."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def test_a_cut_or_emptied_copy_is_never_served_but_fetched_again(volume):
    cut, emptied = os.urandom(13_502), os.urandom(2_000)
    volume.write("d/cut.jpg", cut)
    volume.write("d/emptied.jpg", emptied)
    first = {f.path.rsplit("/", 1)[1]: f.local_path for f in FileStream(volume.path("d"))}
    os.truncate(first["cut.jpg"], 100)  # what a crash after an unsynced link, or a full disk, leaves
    os.truncate(first["emptied.jpg"], 0)
    stream = FileStream(volume.path("d"))
    got = {f.path.rsplit("/", 1)[1]: f.read_bytes() for f in stream}
    assert got == {"cut.jpg": cut, "emptied.jpg": emptied}
    assert (stream.cache.stats.damaged, stream.cache.stats.misses, stream.cache.stats.hits) == (2, 2, 0)
    assert stream.cache.info()["damaged"] == 2 and stream.cache.info()["bytes"] == len(cut) + len(emptied)
    again = FileStream(volume.path("d"))
    assert sorted(f.read_bytes() for f in again) == sorted([cut, emptied]) and again.cache.stats.hits == 2


def test_a_cache_laid_out_before_16_folders_keeps_serving_its_copies_after_an_upgrade(volume):
    import hashlib

    contents = {f"d/{k}.jpg": os.urandom(1_000 + k) for k in range(12)}
    for rel, data in contents.items():
        volume.write(rel, data)
    first = FileStream(volume.path("d"))
    copies_of = {f.path: Path(f.local_path) for f in first}
    usage, objects = first.cache.usage(), Path(first.cache.root) / "objects"
    for path, copy in copies_of.items():  # as versions before kept them: 256 folders, the key then the file's name
        st = volume.local(path[len(volume.vol) + 1:]).stat()
        key = hashlib.sha256(f"{path}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:40]
        (objects / key[:2]).mkdir(mode=0o700, exist_ok=True)
        copy.rename(objects / key[:2] / f"{key}-{path.rsplit('/', 1)[1]}")
    os.truncate(next(objects.glob("??/*-3.jpg")), 10)  # one of them damaged meanwhile
    assert Cache(first.cache.root).info()["entries"] == 12  # counted (and pruned) where they lie
    stream = FileStream(volume.path("d"))
    got = {f.path: f.read_bytes() for f in stream}
    assert got == {f"{volume.vol}/{rel}": data for rel, data in contents.items()}
    stats = stream.cache.stats
    assert (stats.hits, stats.misses, stats.damaged) == (11, 1, 1)  # taken over, not fetched again, but the damaged one
    assert sorted(p.parent.name for p in copies(stream.cache.root)) == sorted(p.parent.name for p in copies_of.values())
    # The copies taken over stay counted as they were; the cut copy is counted off at the length it held.
    assert stream.cache.usage() == usage + len(contents["d/3.jpg"]) - 10 and not list(objects.glob("??/*"))


def test_a_cut_range_entry_is_fetched_again(volume):
    data = os.urandom(20_000)
    src = volume.write("d/shard.parquet", data)
    vpath, st = volume.path("d/shard.parquet"), src.stat()
    cache = Cache(os.environ["AIR_CACHE_DIR"])
    entry = cache.get(str(src), vpath, st.st_size, st.st_mtime_ns, (1000, 5000))
    os.truncate(entry, 3999)
    assert cache.lookup(vpath, st.st_size, st.st_mtime_ns, (1000, 5000)) is None
    again = cache.get(str(src), vpath, st.st_size, st.st_mtime_ns, (1000, 5000))
    assert Path(again).read_bytes() == data[1000:5000] and cache.stats.damaged == 1


def test_verify_fetches_again_a_copy_whose_bytes_changed_under_the_same_length(volume):
    small, large = os.urandom(1500), os.urandom(LONG)  # the large file is copied in ranges, each hashed apart
    volume.write("d/small.bin", small)
    volume.write("d/large.bin", large)
    list(FileStream(volume.path("d"), verify=True))  # a copy by sendfile, hashed back, and one by ranges: checksums
    assert Cache().check().unchecked == 0
    for i, p in enumerate(copies(os.environ["AIR_CACHE_DIR"])):
        flip_a_byte(p, at=1234 * i)
    assert len(Cache().check().damaged) == 2
    assert sorted(f.read_bytes() for f in FileStream(volume.path("d"))) != sorted([small, large])  # lengths only
    stream = FileStream(volume.path("d"), verify=True)
    assert sorted(f.read_bytes() for f in stream) == sorted([small, large])
    assert stream.cache.stats.damaged == 2 and stream.cache.info()["damaged"] == 2
    again = FileStream(volume.path("d"), verify=True)
    assert len(list(again)) == 2 and again.cache.stats.hits == 2  # the new copies carry sound checksums


def test_verify_fetches_again_once_a_copy_made_without_a_checksum(volume):
    volume.files("d", 4)
    list(FileStream(volume.path("d")))  # sendfile copies, no checksum recorded
    assert Cache().check().unchecked == 4
    stream = FileStream(volume.path("d"), verify=True)
    assert len(list(stream)) == 4 and stream.cache.stats.misses == 4 and stream.cache.stats.damaged == 0
    again = FileStream(volume.path("d"), verify=True)
    assert len(list(again)) == 4 and again.cache.stats.hits == 4


def test_verify_takes_a_flag_and_a_cache_that_can_keep_checksums(volume):
    volume.files("d", 2)
    with pytest.raises(OptionError, match="verify='yes': give True or False"):
        FileStream(volume.path("d"), verify="yes")


# -- what a crash leaves is repaired by the cache itself ----------------------------------------------

def part_of(entry: Path) -> Path:
    return entry.with_name(f".{entry.name}.part")


def test_a_part_file_a_killed_fetch_left_is_taken_over_or_pruned_but_never_one_in_progress(volume):
    import fcntl

    data = {k: os.urandom(3000 + k) for k in range(3)}
    for k, d in data.items():
        volume.write(f"d/f{k}.bin", d)
    cache = Cache(os.environ["AIR_CACHE_DIR"])
    entries = {f.path.rsplit("/", 1)[1]: Path(f.local_path) for f in FileStream(volume.path("d"))}
    for name, entry in entries.items():  # each fetch was killed mid-copy: a torn .part, and no entry
        part_of(entry).write_bytes(entry.read_bytes()[:1000])
        entry.unlink()
    busy = os.open(part_of(entries["f2.bin"]), os.O_WRONLY)
    fcntl.flock(busy, fcntl.LOCK_EX)  # a fetch still copying f2
    try:
        (f0,) = [f for f in FileStream(volume.path("d"), include="f0.bin")]
        assert f0.read_bytes() == data[0] and not part_of(entries["f0.bin"]).exists()
        cache.prune()  # f1 is never read again: its .part has no fetch behind it
        assert not part_of(entries["f1.bin"]).exists() and part_of(entries["f2.bin"]).exists()
    finally:
        os.close(busy)
    assert [f.read_bytes() for f in FileStream(volume.path("d"), include="f2.bin")] == [data[2]]
    assert not list(Path(cache.root).rglob("*.part"))


def test_a_full_cache_leaves_no_part_files(volume):
    volume.files("d", 60, size=lambda i: 1000)
    stream = FileStream(volume.path("d"), cache_limit=20_000)
    assert len(list(stream)) == 60 and stream.cache.stats.not_admitted == 40
    assert not list(Path(stream.cache.root).rglob("*.part"))


def test_a_torn_or_stale_ledger_is_counted_again_from_the_disk(volume):
    volume.files("d", 10, size=lambda i: 1000)
    list(FileStream(volume.path("d")))
    root = Path(os.environ["AIR_CACHE_DIR"])
    held, rest = (root / "usage").read_bytes().split(b" ", 1)
    boot = Path("/proc/sys/kernel/random/boot_id").read_bytes().strip()
    assert held == b"10000" and boot in rest
    for ledger in (b"", b"\0\0\0\0", b"12345", b"999999 a-boot-before-the-last-crash",  # torn, or an earlier version's
                   b"999999 " + rest.replace(boot, b"a-boot-before-the-last-crash")):  # written before the last boot
        (root / "usage").write_bytes(ledger)
        assert Cache(str(root)).usage() == 10_000, ledger
    (root / "usage").write_bytes(b"999999 " + rest)
    assert Cache(str(root)).usage() == 999_999  # this boot's: trusted
    cache = Cache(str(root), limit_bytes=50_000)  # over its cap by the ledger: prunes, which counts what is there
    assert cache.usage() == 10_000 and len(copies(root)) == 10
