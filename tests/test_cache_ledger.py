"""The node cache's one ledger: every handle counts what it adds, under one cap; prunes and counts leave the
reservations made meanwhile; a killed process's reservations come back; a forked child can use a handle."""

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest

from air_core import FileStream
from air_core.io import cache as cache_module
from air_core.io.cache import Cache
from conftest import wait_for
from test_cache import copies, slow_env


def fetch(cache: Cache, volume, src: Path) -> str | None:
    st = src.stat()
    return cache.get(str(src), volume.path(str(src.relative_to(volume.local_vol))), st.st_size, st.st_mtime_ns)


def paused_survey(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Make every survey of the cache's entries stop once done, until `resume` is set; `surveyed` says it did."""
    surveyed, resume = threading.Event(), threading.Event()
    survey = cache_module._survey

    def paused(objects):
        found = survey(objects)
        surveyed.set()
        resume.wait(60)
        return found

    monkeypatch.setattr(cache_module, "_survey", paused)
    return surveyed, resume


def test_a_handle_made_without_a_cap_counts_its_copies_and_keeps_to_the_cap_a_capped_one_recorded(volume):
    srcs = [volume.write(f"d/{k}.bin", os.urandom(1000)) for k in range(5)]
    root = os.environ["AIR_CACHE_DIR"]
    uncapped = Cache(root)
    assert fetch(uncapped, volume, srcs[0]) is not None  # no cap recorded yet
    assert uncapped.usage() == 1000 and uncapped.info()["limit_bytes"] is None
    assert fetch(Cache(root, limit_bytes=2500), volume, srcs[1]) is not None  # records 2500 as the node's cap
    assert uncapped.info()["limit_bytes"] == 2500
    assert fetch(uncapped, volume, srcs[2]) is None and uncapped.stats.not_admitted == 1
    assert fetch(Cache(root, limit_bytes=3000), volume, srcs[3]) is not None  # a later cap replaces it
    assert fetch(uncapped, volume, srcs[4]) is None
    assert uncapped.usage() == 3000 == Cache(root).info()["bytes"]


READ_CAPPED = ("import json, sys; from air_core import FileStream\n"
               "s = FileStream(sys.argv[1], cache_limit=int(sys.argv[2]), rank=0, world_size=1)\n"
               "n = sum(len(f.read_bytes()) for f in s)\n"
               "print(json.dumps({'bytes': n, 'misses': s.cache.stats.misses}))\n")
# air_ray.local_path's own handle on the node cache is made without a cap, as the library's readers' are.
READ_ROWS = ("import json, os, sys; import air_ray; from air_core.doors import Cache, transport, volume\n"
             "names, got = Cache(), []\n"
             "for path in sys.argv[1:]:\n"
             "    size, mtime_ns = transport.stat(volume.parse(path).local)\n"
             "    name = os.path.basename(names.entry_path(path, size, mtime_ns))\n"
             "    got.append(air_ray.local_path({'path': path, 'local_path': '/another/node/' + name}))\n"
             "print(json.dumps(got))\n")


@pytest.mark.slow
def test_two_capped_processes_and_a_reader_made_without_a_cap_fill_the_cache_within_the_cap(volume, netvol_so):
    cap, size = 100_000, 3000
    for folder in ("d1", "d2", "d3"):
        volume.files(folder, 30, size=lambda i: size)
    root = os.environ["AIR_CACHE_DIR"]
    seed = volume.write("d0/seed.bin", os.urandom(size))
    assert fetch(Cache(root, limit_bytes=cap), volume, seed) is not None  # a capped job ran here: the node's cap
    rows = sorted(volume.path(str(p.relative_to(volume.local_vol))) for p in volume.local("d3").rglob("*.bin"))
    env = slow_env(netvol_so, volume)
    procs = [subprocess.Popen([sys.executable, "-c", READ_CAPPED, volume.path(folder), str(cap)], env=env,
                              stdout=subprocess.PIPE, text=True) for folder in ("d1", "d2")]
    procs.append(subprocess.Popen([sys.executable, "-c", READ_ROWS, *rows], env=env, stdout=subprocess.PIPE,
                                  text=True))
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert [o["bytes"] for o in outs[:2]] == [30 * size] * 2
    local = {volume.path(str(p.relative_to(volume.local_vol))): p for p in volume.local("d3").rglob("*.bin")}
    assert all(Path(got).read_bytes() == local[path].read_bytes() for path, got in zip(rows, outs[2]))
    held = Cache(root).info()["bytes"]
    assert cap - size < held <= cap  # filled together, to within one file of the cap
    assert Cache(root).usage() == held


def test_prune_takes_off_the_ledger_what_it_removed_and_keeps_what_was_fetched_meanwhile(volume, monkeypatch):
    volume.files("d", 6, size=lambda i: 1000)
    list(FileStream(volume.path("d")))
    root = os.environ["AIR_CACHE_DIR"]
    old = time.time() - 7200
    for p in copies(root):
        os.utime(p, (old, old))
    surveyed, resume = paused_survey(monkeypatch)
    freed = []
    pruning = threading.Thread(target=lambda: freed.append(Cache(root).prune(older_than=3600)))
    pruning.start()
    try:
        assert surveyed.wait(10)
        new = volume.write("e/new.bin", os.urandom(5000))
        assert fetch(Cache(root), volume, new) is not None  # between the prune's survey and its removals
    finally:
        resume.set()
        pruning.join(30)
    assert freed == [6000]
    assert [p.stat().st_size for p in copies(root)] == [5000] and Cache(root).usage() == 5000


def test_changes_asked_by_many_threads_at_once_all_count_under_the_cap(tmp_path):
    from air_core.io.cache_ledger import Ledger

    ledger, admitted = Ledger(str(tmp_path), lambda: 0), []

    def copy_in_turn(k: int) -> None:
        for _ in range(50):
            if ledger.reserve(1000, cap=300_000):  # applied together with the others' asked meanwhile
                admitted.append(k)
                ledger.commit(1000)

    threads = [threading.Thread(target=copy_in_turn, args=(k,)) for k in range(32)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    assert len(admitted) == 300 and ledger.used() == 300_000  # each admitted once, none past the cap, none lost
    ledger.remove(100_000)
    assert ledger.used() == 200_000 and (tmp_path / "usage").read_text().split()[:2] == ["200000", "0"]


def test_a_count_of_the_cache_scans_without_the_ledger_lock(volume, monkeypatch):
    volume.files("d", 10, size=lambda i: 1000)
    list(FileStream(volume.path("d")))
    root = os.environ["AIR_CACHE_DIR"]
    (Path(root) / "usage").write_bytes(b"10000 a-boot-before-the-last-crash")  # to be counted again
    surveyed, resume = paused_survey(monkeypatch)
    counted, got = [], []
    counting = threading.Thread(target=lambda: counted.append(Cache(root).usage()))
    counting.start()
    new = volume.write("e/new.bin", os.urandom(5000))
    try:
        assert surveyed.wait(10)
        other = threading.Thread(target=lambda: got.append((fetch(Cache(root, limit_bytes=1 << 20), volume, new),
                                                            Cache(root).usage())))
        other.start()
        other.join(20)
        waited = other.is_alive()
    finally:
        resume.set()
        counting.join(30)
    assert not waited, "a fetch waited for the count's scan"
    assert got[0][0] is not None and got[0][1] == 10_000 + 5000  # the figure from before, and the new copy
    assert counted == [15_000] and Cache(root).usage() == 15_000 == Cache(root).info()["bytes"]


@pytest.mark.slow
def test_a_killed_process_reservation_is_given_back(volume, netvol_so):
    data = os.urandom(3 << 20)
    volume.write("big/blob.bin", data)
    cap = 4 << 20  # room for one copy: not for a second while the killed one's reservation stays
    code = ("import sys; from air_core import FileStream\n"
            "for f in FileStream(sys.argv[1], cache_limit=int(sys.argv[2])): pass\n")
    proc = subprocess.Popen([sys.executable, "-c", code, volume.path("big"), str(cap)],
                            env=slow_env(netvol_so, volume, NETVOL_MBPS="1"))
    root = Path(os.environ["AIR_CACHE_DIR"])
    wait_for(lambda: proc.poll() is not None or any(p.name.endswith(".part") and p.stat().st_size
                                                     for p in (root / "objects").rglob("*")), 30, "the fetch to start")
    assert proc.poll() is None, "the fetch ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (killed,) = (root / "reserved").iterdir()  # the killed process's reservations, its lock free
    stream = FileStream(volume.path("big"), cache_limit=cap)
    (f,) = list(stream)
    assert f.cached and f.read_bytes() == data
    assert stream.cache.usage() == 3 << 20 and not killed.exists()


@pytest.mark.slow
def test_a_process_forked_while_threads_fetch_through_a_handle_can_use_it(volume, monkeypatch):
    a, b, c = (volume.write(f"d/{name}.bin", os.urandom(3000 + k)) for k, name in enumerate("abc"))
    root = os.environ["AIR_CACHE_DIR"]
    assert fetch(Cache(root), volume, c) is not None
    cache = Cache(root, limit_bytes=1 << 20)
    stuck, release, parent = threading.Event(), threading.Event(), os.getpid()
    disk_usage = shutil.disk_usage

    def slow_disk(path):  # the parent's fetch of a stops here, holding the handle's lock, a's .part and a in flight
        if os.getpid() == parent:
            stuck.set()
            release.wait(30)
        return disk_usage(path)

    monkeypatch.setattr(shutil, "disk_usage", slow_disk)
    first = threading.Thread(target=fetch, args=(cache, volume, a))
    first.start()
    assert stuck.wait(10)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            st = c.stat()
            found = cache.lookup(volume.path("d/c.bin"), st.st_size, st.st_mtime_ns)
            fetched = fetch(cache, volume, b)
            os.write(w, b"b\n")
            waited = fetch(cache, volume, a)  # the parent's copy, once its thread lets a's .part go
            s = cache.stats
            os.write(w, json.dumps({"served": [found, fetched, waited], "hits": s.hits, "misses": s.misses,
                                    "hedged": s.hedged}).encode())
            status = 0
        except BaseException:
            os.write(w, traceback.format_exc().encode())
        finally:
            os._exit(status)
    os.close(w)
    out, ended = b"", False
    try:
        try:
            assert select.select([r], [], [], 30)[0], "the child waited on what its parent's thread held"
            assert os.read(r, 2) == b"b\n"
            # The child waits for a's .part, which the parent's thread holds: a waiter of the kernel's.
            wait_for(lambda: any(" -> " in line and f" {pid} " in line for line in Path("/proc/locks").open()), 30,
                     "the child to wait for a's .part")
        finally:
            release.set()
            first.join(30)
        while not ended and select.select([r], [], [], 30)[0]:
            chunk = os.read(r, 1 << 16)
            out, ended = out + chunk, not chunk  # the end of the pipe: the child exited
    finally:
        os.close(r)
        if not ended:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert ended, f"the child did not finish: {out.decode()}"
    child = json.loads(out)
    assert child["served"] == [str(Path(cache.entry_path(volume.path(f"d/{n}.bin"), p.stat().st_size,
                                                         p.stat().st_mtime_ns))) for n, p in zip("cba", (c, b, a))]
    assert (child["hits"], child["misses"], child["hedged"]) == (2, 1, 0)  # its own counts; a was no hedge
    assert Cache(root).usage() == sum(p.stat().st_size for p in (a, b, c)) == Cache(root).info()["bytes"]
