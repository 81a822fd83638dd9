"""FileStream end to end: ranks x workers, resume exactly-once, elastic resume, pickling."""

import ctypes
import gc
import json
import os
import pickle
import random
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
import torch.utils.data
from conftest import torchrun, wait_for

from air_core import FileStream, StateError, run_state
from air_core.io import fetch
from air_core.read.files import FilesReader

SCRIPT = Path(__file__).parent / "scripts" / "core_ranks.py"


@pytest.mark.slow
@pytest.mark.parametrize("equalize", ["none", "pad"])
def test_torchrun_three_ranks_two_workers_cover_the_folder_once(volume, tmp_path, equalize):
    paths = volume.files("d", 47, size=lambda i: 100 + (i * 7919) % 5000)
    torchrun(SCRIPT, 3, volume.path("d"), str(tmp_path), equalize)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    assert len({r["fingerprint"] for r in ranks}) == 1
    got = [p for r in ranks for p in r["paths"]]
    assert all(len(r["paths"]) == r["len"] for r in ranks)
    if equalize == "none":
        assert sorted(got) == paths  # union = manifest, no duplicates
    else:
        assert set(got) == set(paths)
        assert [len(r["paths"]) for r in ranks] == [16, 16, 16]
        assert len(got) - len(set(got)) == 1  # 47 over 3 ranks: exactly one repeat


def test_a_job_lists_once_and_every_rank_maps_the_same_listing_file(volume, tmp_path, netvol_so):
    volume.files("d", 30)
    trace = tmp_path / "trace"
    env = {"LD_PRELOAD": netvol_so, "NETVOL_PREFIX": f"{volume.root}/", "NETVOL_OPEN_MS": "0",
           "NETVOL_LIST_MS": "0", "NETVOL_TRACE": str(trace)}
    torchrun(SCRIPT, 3, volume.path("d"), str(tmp_path), "none", env=env)
    lists = [line for line in trace.read_text().splitlines() if line.startswith("list ")]
    assert len(lists) == 4  # d/ and its three class folders, by rank 0 alone
    listings = list((Path(os.environ["AIR_CACHE_DIR"]) / "manifests").iterdir())
    assert [f.suffix for f in listings] == [".listing"]  # saved once, mapped by every rank and worker
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    assert sorted(p for r in ranks for p in r["paths"]) == sorted(volume.path(f"d/class{i % 3}/f{i:05d}.bin")
                                                                  for i in range(30))


GRIDS = [(1, 1), (2, 1), (1, 3), (3, 2)]


@pytest.mark.parametrize("world,workers", GRIDS)
def test_resume_at_random_points_is_exactly_once(volume, world, workers):
    volume.files("d", 60)
    rng = random.Random(world * 10 + workers)
    opts = dict(shuffle=True, seed=11)
    for _ in range(3):
        delivered = []
        for r in range(world):
            for w in range(workers):
                grid = dict(rank=r, world_size=world, worker=w, num_workers=workers)
                first = FileStream(volume.path("d"), **opts, **grid)
                first.set_epoch(2)
                it = iter(first)
                stop = rng.randint(0, len(first.items()))
                delivered += [next(it).path for _ in range(stop)]
                state = pickle.loads(pickle.dumps(first.state_dict()))
                second = FileStream(volume.path("d"), **opts, **grid)
                second.load_state_dict(state)
                assert second.epoch == 2
                delivered += [f.path for f in second]
        m = FileStream(volume.path("d")).manifest
        assert sorted(delivered) == [m.volume_path(i) for i in range(len(m))]


def test_elastic_resume_on_another_grid_is_exactly_once(volume):
    volume.files("d", 83, size=lambda i: 50 + i * 13)
    opts = dict(shuffle=True, seed=5, equalize="none")
    rng = random.Random(1)
    delivered, states = [], []
    for r in range(2):
        for w in range(2):
            s = FileStream(volume.path("d"), rank=r, world_size=2, worker=w, num_workers=2, **opts)
            it = iter(s)
            delivered += [next(it).path for _ in range(rng.randint(0, 15))]
            states.append(s.state_dict())
    run = json.loads(json.dumps(run_state(states)))
    # Resume on 1 rank x 3 workers, stop again part-way, then resume on 3 ranks x 1 worker.
    states2 = []
    for w in range(3):
        s = FileStream(volume.path("d"), rank=0, world_size=1, worker=w, num_workers=3, **opts)
        s.load_state_dict(run)
        it = iter(s)
        delivered += [next(it).path for _ in range(rng.randint(0, 10))]
        states2.append(s.state_dict())
    run2 = run_state(states2)
    for r in range(3):
        s = FileStream(volume.path("d"), rank=r, world_size=3, **opts)
        s.load_state_dict(pickle.loads(pickle.dumps(run2)))
        delivered += [f.path for f in s]
    counts = Counter(delivered)
    assert len(counts) == 83 and set(counts.values()) == {1}


def test_chained_resumes_keep_the_run_state_small_and_exactly_once(volume):
    # Five stops and resumes in one epoch over 8 streams, each state through JSON as a
    # checkpoint would take it: the state grows by a level each time, not 8-fold.
    volume.files("d", 200, size=lambda i: 10 + (i * 7919) % 500)
    grids = [(4, 2), (2, 4), (8, 1), (1, 8), (4, 2)]
    delivered, run, sizes = [], None, []
    for world, workers in grids:
        states = []
        for r in range(world):
            for w in range(workers):
                s = FileStream(volume.path("d"), rank=r, world_size=world, worker=w, num_workers=workers)
                if run is not None:
                    s.load_state_dict(run)
                it = iter(s)
                delivered += [f.path for _, f in zip(range(4), it)]
                states.append(s.state_dict())
        run = json.loads(json.dumps(run_state(states)))
        sizes.append(len(json.dumps(run)))
    assert sizes[-1] < 6 * sizes[0]
    for r in range(3):
        s = FileStream(volume.path("d"), rank=r, world_size=3)
        s.load_state_dict(run)
        delivered += [f.path for f in s]
    counts = Counter(delivered)
    assert len(counts) == 200 and set(counts.values()) == {1}


def test_a_loaded_state_saved_again_before_iterating_stands_where_it_was(volume):
    volume.files("d", 12)
    a = FileStream(volume.path("d"), num_workers=1)
    it = iter(a)
    first = [next(it).path for _ in range(5)]
    b = FileStream(volume.path("d"))
    b.load_state_dict(a.state_dict())
    c = FileStream(volume.path("d"))
    c.load_state_dict(b.state_dict())  # b never iterated
    assert len(first) + len(list(c)) == 12
    d = FileStream(volume.path("d"), rank=0, world_size=2)
    d.load_state_dict(run_state([a.state_dict()]))
    e = FileStream(volume.path("d"), rank=0, world_size=2)
    e.load_state_dict(run_state([d.state_dict()]))  # d never iterated: still the first resume
    f = FileStream(volume.path("d"), rank=1, world_size=2)
    f.load_state_dict(run_state([a.state_dict()]))
    assert sorted(first + [x.path for x in e] + [x.path for x in f]) == sorted(set(first + [x.path for x in c]))


def test_states_from_different_runs_are_not_gathered(volume):
    volume.files("d", 10)
    a = FileStream(volume.path("d"), rank=0, world_size=2)
    b = FileStream(volume.path("d"), rank=1, world_size=2, shuffle=True)
    with pytest.raises(StateError, match="differ in 'options'"):
        run_state([a.state_dict(), b.state_dict()])
    with pytest.raises(StateError, match="no stream states"):
        run_state([])


def test_state_from_another_grid_or_listing_is_refused(volume):
    volume.files("d", 10)
    a = FileStream(volume.path("d"), rank=0, world_size=2)
    list(a)
    b = FileStream(volume.path("d"), rank=1, world_size=2)
    b.load_state_dict(a.state_dict())
    with pytest.raises(StateError, match="to resume on another grid"):
        list(b)
    volume.write("d/new.bin", b"x")
    c = FileStream(volume.path("d"))
    with pytest.raises(StateError, match="the folder changed"):
        c.load_state_dict(a.state_dict())
    with pytest.raises(StateError, match="plan options"):
        FileStream(volume.path("d"), shuffle=True).load_state_dict({**c.state_dict()})
    with pytest.raises(StateError, match="not a FileStream state"):
        c.load_state_dict({"position": 3})


def test_a_pickled_stream_is_small_and_reads_the_same(volume):
    volume.files("d", 3000, size=lambda i: 10)
    stream = FileStream(volume.path("d"), shuffle=True)
    blob = pickle.dumps(stream)
    assert len(blob) < 2000
    clone = pickle.loads(blob)
    assert [f.path for f in clone] == [f.path for f in stream]


def test_set_epoch_reshuffles_and_len_counts_the_rank(volume):
    volume.files("d", 20)
    s = FileStream(volume.path("d"), shuffle=True, rank=1, world_size=3)
    e0 = [f.index for f in s]
    s.set_epoch(1)
    e1 = [f.index for f in s]
    assert sorted(e0) == sorted(e1) and e0 != e1
    assert len(s) == len(e0) == 7


@pytest.mark.slow
def test_ranks_without_a_process_group_compare_their_listings(volume, tmp_path):
    volume.files("d", 6)
    torchrun(Path(__file__).parent / "scripts" / "core_mismatch.py", 2, volume.path("d"), str(tmp_path))
    for r in range(2):
        assert "ranks listed different files" in (tmp_path / f"rank{r}.txt").read_text()


@pytest.mark.parametrize(("num_workers", "threads"), [(1, 64), (2, 32), (6, 32)])
def test_streams_of_several_dataloader_workers_read_with_fewer_threads_each(volume, num_workers, threads,
                                                                           monkeypatch):
    # A hedge adds a thread (a read slowed by load can earn one): with none, each new one is the pool's.
    monkeypatch.setattr(fetch, "HEDGE_ALLOWANCE", 0)
    monkeypatch.setattr(fetch, "HEDGE_SHARE", 0)
    volume.files("d", 6 * 80)
    for fetch_threads, want in ((None, threads), (5, 5)):
        before = set(threading.enumerate())  # threads of earlier tests may still be ending: not counted
        it = iter(FileStream(volume.path("d"), worker=0, num_workers=num_workers, fetch_threads=fetch_threads,
                             cache_dir=str(volume.root.parent / f"cache-{fetch_threads}")))
        next(it)
        pool = [t for t in set(threading.enumerate()) - before if t.name == "air-fetch"]
        assert len(pool) == want
        it.close()
        wait_for(lambda: not any(t.is_alive() for t in pool), 60, "the stream's fetch threads to end")


def test_states_from_before_versions_resume_unless_they_resume_a_resume(volume):
    volume.files("d", 30)
    a = FileStream(volume.path("d"), rank=0, world_size=2)
    it = iter(a)
    first = [next(it).path for _ in range(4)]
    # as version 1 saved it: no version, and the plan options under "plan"
    old = {("plan" if k == "options" else k): v for k, v in a.state_dict().items() if k != "version"}
    b = FileStream(volume.path("d"), rank=0, world_size=2)
    b.load_state_dict(old)
    assert not set(first) & {f.path for f in b}
    chained = {**old, "resumed_from": {("plan" if k == "options" else k): v
                                       for k, v in run_state([a.state_dict()]).items() if k != "version"}}
    with pytest.raises(StateError, match="resumes a resume"):
        FileStream(volume.path("d"), rank=0, world_size=2).load_state_dict(chained)
    c = FileStream(volume.path("d"), rank=0, world_size=2)
    c.load_state_dict(run_state([a.state_dict()]))
    next(iter(c))
    by_hand = {"epoch": 0, "fingerprint": old["fingerprint"], "options": old["plan"], "streams": [c.state_dict()]}
    FileStream(volume.path("d"), rank=0, world_size=2).load_state_dict(by_hand)  # streams of this version
    with pytest.raises(StateError, match="version 9 is not supported"):
        FileStream(volume.path("d"), rank=0, world_size=2).load_state_dict({**a.state_dict(), "version": 9})


class _FrozenCount(torch.utils.data.IterableDataset):
    """The number of frozen objects in a worker once it has read its first file."""

    def __init__(self, stream: FileStream) -> None:
        self.stream = stream

    def __iter__(self):
        next(iter(self.stream))
        yield gc.get_freeze_count()


@pytest.mark.slow
def test_a_plain_dataloader_worker_freezes_what_it_inherited(volume):
    # Else its first full collection copies every page of the parent's objects (measured: 31 MB a worker).
    volume.files("d", 8)
    gc.unfreeze()  # an earlier test's DataLoader may have frozen nearly everything this process holds
    loader = torch.utils.data.DataLoader(_FrozenCount(FileStream(volume.path("d"))), num_workers=2,
                                         batch_size=None, multiprocessing_context="fork")
    frozen = gc.get_freeze_count()
    assert all(n > frozen + 1000 for n in loader)
    assert gc.get_freeze_count() == frozen  # the parent is left as it was


@pytest.mark.parametrize("removed", [(), (2, 600), (1050,)], ids=["all-cached", "early-misses", "last-chunk-miss"])
def test_a_warm_pass_yields_every_file_in_order_from_its_copy_up_to_and_past_misses(volume, removed):
    # 1,200 files are 6 chunks (32, 64, ..., 512, 208): runs of hits cross chunks, and a miss in any of them
    # hands the rest, later chunks too, to the reads ahead.
    volume.files("d", 1200, size=lambda i: 1 + i % 50)
    stream = FileStream(volume.path("d"), shuffle=True, seed=3)
    first = list(stream)
    for k in removed:
        os.unlink(first[k].local_path)
    again = FileStream(volume.path("d"), shuffle=True, seed=3)
    got = list(again)
    assert [(f.path, f.size, f.index, f.local_path, f.cached) for f in got] == \
        [(f.path, f.size, f.index, f.local_path, True) for f in first]
    assert {type(f.index) for f in first + got} == {int}  # the plan is an array; what a stream yields is not
    assert all(f.read_bytes() == volume.local(f.path.removeprefix(volume.path() + "/")).read_bytes() for f in got)
    assert (again.cache.stats.hits, again.cache.stats.misses) == (1200 - len(removed), len(removed))
    assert again.state_dict()["consumed"] == 1200


@pytest.mark.parametrize("planning", [{}, {"equalize": "pad"}, {"balance": "stride", "equalize": "drop"},
                                      {"shuffle": True, "seed": 5}], ids=["bytes", "pad", "stride-drop", "shuffle"])
def test_a_stream_plans_again_only_when_the_epoch_changes_its_plan(volume, monkeypatch, planning):
    volume.files("d", 41, size=lambda i: 100 + (i * 7919) % 900)
    planned = []
    plan = FilesReader.plan
    monkeypatch.setattr(FilesReader, "plan", lambda self, *a, **kw: planned.append(1) or plan(self, *a, **kw))
    grid = {"rank": 1, "world_size": 3, "worker": 1, "num_workers": 2}
    stream = FileStream(volume.path("d"), **grid, **planning)
    for epoch in range(4):
        stream.set_epoch(epoch)
        fresh = FileStream(volume.path("d"), **grid, **planning)
        fresh.set_epoch(epoch)
        expected = [f.index for f in fresh]
        assert [f.index for f in stream] == expected
        stream.items().clear()  # a caller's copy: the next pass keeps its plan
    passes = 4 if planning.get("shuffle") else 1
    assert len(planned) == passes + 4
    half = stream.state_dict()  # at the end of epoch 3: resume its own grid mid-epoch from a later state
    half["consumed"] = 3
    stream.load_state_dict(half)
    assert [f.index for f in stream] == expected[3:]


def test_a_mixture_plans_each_epoch_for_its_own_draw(volume):
    volume.files("a", 12)
    volume.files("b", 9)
    sources = [{"path": volume.path("a"), "repeat": 0.5}, {"path": volume.path("b"), "repeat": 1}]
    stream = FileStream(sources=sources, worker=0, num_workers=2)
    passes = []
    for epoch in range(3):
        stream.set_epoch(epoch)
        fresh = FileStream(sources=sources, worker=0, num_workers=2)
        fresh.set_epoch(epoch)
        passes.append([f.path for f in stream])
        assert passes[-1] == [f.path for f in fresh]
    assert len({tuple(p) for p in passes}) > 1  # half of a's files a draw: not the same every epoch


def test_a_streams_position_is_its_states(volume):
    volume.files("d", 10)
    stream = FileStream(volume.path("d"), worker=1, num_workers=2)
    part = lambda s: (s["epoch"], tuple(s["grid"]), s["consumed"])  # noqa: E731
    assert stream.position() == part(stream.state_dict())  # before any pass
    it = iter(stream)
    next(it), next(it)
    assert stream.position() == part(stream.state_dict()) == (0, (0, 1, 1, 2), 2)
    state = stream.state_dict()
    list(it)
    stream.load_state_dict(state)
    assert stream.position() == part(state)  # loaded, not yet iterated: where the state said


_PLAN_MEMORY = r'''
import gc, json, os, sys
import numpy as np
from air_core import FileStream, heap
from air_core.io import volume
from air_core.manifest import Manifest

def anon_kb():
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Pss_Anon:"))

n = 1_000_000
names = [f"d{i // 1000:04d}/f{i:07d}.jpg" for i in range(n)]
sizes = np.random.default_rng(0).lognormal(np.log(150_000), 0.5, n).astype(np.int64) + 1
m = Manifest.from_columns(sys.argv[1], names, sizes, np.zeros(n, np.int64))
del names
m.largest_first  # the listing's own (a saved listing carries it), not the plan's
stream = FileStream(sys.argv[1], manifest=m, rank=0, world_size=2, worker=0, num_workers=2, shuffle=True,
                    fetch_threads=1, prefetch=1)
first = stream.items()[0]
local = f"{volume.parse(sys.argv[1]).local}/{m.paths[first]}"
os.makedirs(os.path.dirname(local), exist_ok=True)
with open(local, "wb") as f:
    f.truncate(int(m.sizes[first]))
os.utime(local, ns=(0, 0))
gc.collect()
heap.give_back_freed()  # what building the listing and `items()` left
before = anon_kb()
it = iter(stream)
got = next(it)
print(json.dumps({"first": got.index == first, "grown_kb": anon_kb() - before}))
'''


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="measures memory through Linux's /proc")
@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_trim"),
                    reason="gives the heap back through glibc's malloc_trim; another C library keeps it as it does")
def test_a_stream_of_a_long_share_holds_its_plan_as_an_array_and_none_of_its_temporaries(volume):
    # A share of 10^6 files, 250,000 items: its plan's arrays (~4 MB each) come from the C heap once one is
    # freed; kept, they grew the process by ~21 MB, and the plan as Python ints by ~7 MB more (a DataLoader
    # worker at 10^7 files holds them for its life).
    volume.files("d", 1)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _PLAN_MEMORY, volume.path("d")], env=env, capture_output=True,
                         text=True, check=True)
    got = json.loads(out.stdout)
    assert got["first"]
    assert got["grown_kb"] < 250_000 * 8 / 1024 + 2048  # its items as int64, and 2 MB to spare (measured: 2.0 MB)
