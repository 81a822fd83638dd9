"""Reads that survive a volume's errors and stalls: retried, failing clearly, hedged when stuck.

Faults come from netvol in a subprocess; bounds are generous (2 busy cores).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from air_core.io.cache import Cache
from air_core.io import cache as cache_mod
from test_cache import opens, slow_env

READ_ALL = r"""
import hashlib, json, sys
from air_core import FileStream
stream = FileStream(sys.argv[1])
got = [(f.path, hashlib.sha256(f.read_bytes()).hexdigest()) for f in stream]
s = stream.cache.stats
print(json.dumps({"got": got, "misses": s.misses, "hedged": s.hedged}))
"""


def read_all(volume, env: dict, timeout: float) -> dict:
    out = subprocess.run([sys.executable, "-c", READ_ALL, volume.path("d")], env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def expected(volume, paths: list[str]) -> list[tuple[str, str]]:
    return [(p, hashlib.sha256(volume.local(p[len(volume.vol) + 1:]).read_bytes()).hexdigest()) for p in paths]


def cache_files(root: Path) -> tuple[list[Path], list[Path]]:
    """(entries, everything else) under the cache's objects folder."""
    files = [p for p in (root / "objects").rglob("*") if p.is_file()]
    return [p for p in files if not p.name.startswith(".")], [p for p in files if p.name.startswith(".")]


@pytest.mark.slow
def test_transient_errors_are_retried_and_every_file_arrives_once(volume, netvol_so, tmp_path):
    paths = volume.files("d", 300, size=lambda i: 3000 + i)
    trace = tmp_path / "trace"
    r = read_all(volume, slow_env(netvol_so, volume, trace, NETVOL_FAIL_PCT="5", NETVOL_SEED="7"), 180)
    assert [tuple(g) for g in r["got"]] == expected(volume, paths)
    assert r["misses"] == 300
    entries, _ = cache_files(Path(os.environ["AIR_CACHE_DIR"]))
    assert len(entries) == 300


@pytest.mark.slow
def test_a_file_that_stays_unreadable_is_a_clear_error_naming_it(volume, netvol_so):
    volume.files("d", 30)
    bad = "d/class1/f00004.bin"
    out = subprocess.run([sys.executable, "-c", READ_ALL, volume.path("d")], capture_output=True, text=True,
                         env=slow_env(netvol_so, volume, NETVOL_FAIL_MATCH="f00004"), timeout=120)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("air_core.errors.FetchError: [Errno 5] cannot read ") and volume.path(bad) in last
    assert "after 10 attempts: Input/output error" in last


@pytest.mark.slow
def test_a_stalled_read_is_hedged_and_the_pass_ends_long_before_the_stall(volume, netvol_so, tmp_path):
    # 0.2% of 1,500 reads stall for an hour: about three stalls per pass, each hedged after ~0.15 s; a stall
    # waited for would outlast the run's timeout. How much stalls slow a pass: benchmarks/bench_stalls.py.
    paths = volume.files("d", 1500, size=lambda i: 1000 + i)
    trace = tmp_path / "trace"
    env = slow_env(netvol_so, volume, trace, NETVOL_HANG_PCT="0.2", NETVOL_HANG_MS="3600000", NETVOL_SEED="3")
    r = read_all(volume, env, 120)
    assert [tuple(g) for g in r["got"]] == expected(volume, paths)
    assert r["misses"] == 1500
    assert sum(opens(trace).values()) - 1500 == r["hedged"] <= 4 + 15
    entries, hidden = cache_files(Path(os.environ["AIR_CACHE_DIR"]))
    assert len(entries) == 1500
    # A stuck read killed at exit leaves only its empty, locked-name .part; a hedge leaves nothing.
    assert all(p.name.endswith(".part") and p.stat().st_size == 0 for p in hidden), hidden
    assert len(hidden) <= r["hedged"]  # each read still stuck at the end had been overtaken by a hedge
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in entries + hidden)


def test_a_hedge_wins_over_a_stuck_copy_which_then_neither_clobbers_nor_counts(volume, monkeypatch):
    data = os.urandom(5000)
    src = volume.write("d/a.bin", data)
    st = src.stat()
    cache = Cache(limit_bytes=1 << 20)
    release, stuck = threading.Event(), threading.Event()
    send = os.sendfile

    def first_call_sticks(out, in_, offset, count):  # the first copy's read from the volume hangs
        if not stuck.is_set():
            stuck.set()
            release.wait(30)
        return send(out, in_, offset, count)

    monkeypatch.setattr(os, "sendfile", first_call_sticks)
    first: list[str | None] = []
    t = threading.Thread(target=lambda: first.append(cache.get(str(src), volume.path("d/a.bin"), st.st_size,
                                                               st.st_mtime_ns)))
    t.start()
    assert stuck.wait(10)
    entry = cache.get(str(src), volume.path("d/a.bin"), st.st_size, st.st_mtime_ns)
    assert Path(entry).read_bytes() == data and t.is_alive()  # served while the first copy is stuck
    before = os.stat(entry).st_ino
    release.set()
    t.join(10)
    assert first == [entry] and os.stat(entry).st_ino == before  # the late copy did not replace it
    assert (cache.stats.misses, cache.stats.hedged) == (1, 1)
    assert cache.usage() == 5000
    entries, hidden = cache_files(Path(cache.root))
    assert entries == [Path(entry)] and hidden == []
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o600


def test_a_stalled_range_of_a_large_file_is_hedged(volume, monkeypatch):
    data = os.urandom(1 << 20) * 40  # 40 MiB: three ranges
    src = volume.write("big/t.parquet", data)
    st = src.stat()
    release = threading.Event()
    preadv = os.preadv
    calls: list[int] = []

    def second_range_sticks_once(fd, buffers, offset, *flags):  # the first read of the second range hangs
        if offset == cache_mod._RANGE:
            calls.append(offset)
            if len(calls) == 1:
                release.wait(60)
        return preadv(fd, buffers, offset, *flags)

    monkeypatch.setattr(os, "preadv", second_range_sticks_once)
    cache = Cache()
    entry = cache.get(str(src), volume.path("big/t.parquet"), st.st_size, st.st_mtime_ns)
    assert Path(entry).read_bytes() == data
    assert len(calls) == 2  # the stuck read (60 s) was overtaken: a hedge read the second range again
    release.set()
