"""Packs: air-data pack, and every front door reading a pack as the loose files it holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from air_core import EmptyVolumeError, FileStream, OptionError, VolumePathError, pack, resolve_source, run_state
from air_core.grid import Grid
from air_core.packs.layout import cuts
from air_core.sizes import parse_size
from air_core.packs.plan import plan_packs
from air_core.planning.shares import Planning
from air_core.packs.store import GENERATIONS, POINTER, pack_folder
from conftest import wait_for
from test_cache import opens, slow_env

RUN = Path(__file__).parent / "scripts" / "pack_run.py"
SHARD = 40_000  # ~30 files of the volume below per shard: several shards, row groups of ~8 files


def loose_files(volume, folder: str = "d", n: int = 90) -> dict[str, bytes]:
    """n files in class folders, of varied sizes; returns {volume path: bytes}."""
    volume.files(folder, n, size=lambda i: 200 + (i * 7919) % 2500)
    return {f.path: f.read_bytes() for f in FileStream(volume.path(folder))}


def read(path: str, **kw) -> list[tuple[str, bytes]]:
    return [(f.path, f.read_bytes()) for f in FileStream(path, **kw)]


# -- layout and plan: pure -------------------------------------------------------------------


def test_cuts_are_contiguous_even_and_never_empty():
    assert cuts([10] * 10, 30) == [(0, 3), (3, 5), (5, 8), (8, 10)]
    assert cuts([100, 1, 1, 1], 50) == [(0, 1), (1, 4)]
    assert cuts([5] * 3, 1) == [(0, 1), (1, 2), (2, 3)]
    assert cuts([], 10) == []
    assert (parse_size("1GiB"), parse_size("512MiB"), parse_size("2GB"), parse_size(7)) == (1 << 30, 1 << 29,
                                                                                            2 * 10**9, 7)
    with pytest.raises(OptionError, match="1GiB"):
        parse_size("lots")


@pytest.mark.parametrize("equalize", ["none", "pad", "drop"])
def test_plan_covers_every_file_once_in_row_group_runs(equalize):
    rows = [7, 3, 9, 9, 2, 8, 5]
    planning = Planning(seed=4, shuffle=True, equalize=equalize)
    streams = [plan_packs(rows, Grid(r, 3, w, 2), planning=planning, epoch=1)
               for r in range(3) for w in range(2)]
    per_rank = [len(streams[2 * r]) + len(streams[2 * r + 1]) for r in range(3)]
    got = [i for s in streams for i in s]
    if equalize == "none":
        assert sorted(got) == list(range(43)) and max(per_rank) - min(per_rank) <= 1
    else:
        assert per_rank == [15, 15, 15] if equalize == "pad" else [14, 14, 14]
        assert len(set(got)) == (43 if equalize == "pad" else 42)
    unit = [u for u, n in enumerate(rows) for _ in range(n)]
    for s in streams:  # a row group's files come together: each stream reads each of its row groups once
        runs = [unit[i] for k, i in enumerate(s) if k == 0 or unit[s[k - 1]] != unit[i]]
        assert len(runs) == len(set(runs))


def test_plan_is_the_same_on_every_rank_and_shuffles_within_row_groups():
    rows = [50, 50]
    shuffled = Planning(seed=1, shuffle=True)
    a = plan_packs(rows, Grid(0, 1, 0, 1), planning=shuffled, epoch=0)
    assert a == plan_packs(rows, Grid(0, 1, 0, 1), planning=shuffled, epoch=0)
    assert a != plan_packs(rows, Grid(0, 1, 0, 1), planning=shuffled, epoch=1)
    assert sorted(a[:50]) in (list(range(50)), list(range(50, 100))) and a[:50] != sorted(a[:50])


# -- packing ----------------------------------------------------------------------------------


def test_a_pack_reads_as_the_loose_files_and_packing_again_writes_nothing(volume):
    loose = loose_files(volume)
    r = pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    assert (r.files, r.written, r.skipped, r.bytes) == (90, len(r.shards), False, sum(map(len, loose.values())))
    assert len(r.shards) > 2
    assert dict(read(volume.path("packed"))) == loose
    import pyarrow.parquet as pq

    table = pq.read_table(volume.local(r.path[len(volume.vol) + 1:]))  # any Parquet reader reads the shards
    assert table.column_names == ["path", "size", "mtime", "bytes", "label"]
    assert table.num_rows == 90 and set(table["label"].to_pylist()) == {"class0", "class1", "class2"}
    stamp = {p: p.stat().st_mtime_ns for p in volume.local("packed").rglob("*")}
    again = pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    assert again.skipped and again.path == r.path
    assert {p: p.stat().st_mtime_ns for p in volume.local("packed").rglob("*")} == stamp


def test_a_damaged_row_group_copy_is_never_served_but_fetched_again(volume):
    import re

    from test_cache import copies, flip_a_byte

    loose = loose_files(volume)
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    assert dict(read(volume.path("packed"), verify=True)) == loose  # the copies record their checksums
    ranges = [p for p in copies(os.environ["AIR_CACHE_DIR"]) if re.match(r"[0-9a-f]+-\d+-\d+-", p.name)]
    assert len(ranges) > 4
    for p in ranges[::2]:
        os.truncate(p, p.stat().st_size // 2)
    stream = FileStream(volume.path("packed"))
    assert dict((f.path, f.read_bytes()) for f in stream) == loose
    assert stream.cache.stats.damaged == len(ranges[::2])
    for p in ranges[1::2]:
        flip_a_byte(p, at=p.stat().st_size // 2)
    stream = FileStream(volume.path("packed"), verify=True)
    assert dict((f.path, f.read_bytes()) for f in stream) == loose
    assert stream.cache.stats.damaged == len(ranges[1::2])


ODD_SIZES = [0, 1, 5, 0, 3 << 20, 70_000, 0, 1_048_573, 12, 2_500_000, 0] + [300 + 97 * i for i in range(40)]


def at_their_offsets(shard: bytes, contents: list[bytes], offsets) -> bool:
    """Each file's bytes sit at its offset, right after their length (where a Parquet value is), in order."""
    ends = [int(o) + len(c) for o, c in zip(offsets, contents)]
    return all(shard[o - 4:o] == len(c).to_bytes(4, "little") and shard[o:o + len(c)] == c
               for o, c in zip(offsets, contents)) and all(e + 4 <= o for e, o in zip(ends, offsets[1:]))


@pytest.mark.parametrize("page", [dict(), dict(data_page_size=1000, write_batch_size=1), dict(max_rows_per_page=3),
                                  dict(data_page_size=1, write_batch_size=2, data_page_version="2.0")])
def test_offsets_come_from_the_page_headers_for_any_page_layout(tmp_path, page):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from air_core.packs.write import _WRITER_OPTIONS, _schema
    from air_core.packs.pages import value_offsets

    contents = [os.urandom(n) for n in ODD_SIZES]
    schema = _schema(True, pa.binary())
    path = tmp_path / "shard.parquet"
    with pq.ParquetWriter(path, schema, **{**_WRITER_OPTIONS, **page}) as writer:
        for a, b in [(0, 4), (4, 5), (5, 30), (30, len(contents))]:  # row groups: empty files alone, a large one
            writer.write_table(pa.table({"path": [f"c/{i}" for i in range(a, b)], "size": ODD_SIZES[a:b],
                                         "mtime": [0] * (b - a), "bytes": contents[a:b],
                                         "label": ["c"] * (b - a)}, schema=schema))
    offsets = value_offsets(str(path), "bytes", ODD_SIZES)
    assert at_their_offsets(path.read_bytes(), contents, offsets)
    with pytest.raises(AssertionError):  # sizes other than those stored are refused, never recorded wrong
        value_offsets(str(path), "bytes", ODD_SIZES[:3] + [ODD_SIZES[3] + 1] + ODD_SIZES[4:])


def test_packed_files_of_any_size_are_read_from_their_offsets(volume):
    import numpy as np

    loose = {volume.path(f"odd/class{i % 2}/f{i:03d}.bin"): os.urandom(n) for i, n in enumerate(ODD_SIZES)}
    for path, data in loose.items():
        volume.write(path[len(volume.vol) + 1:], data)
    r = pack(volume.path("odd"), volume.path("packed"), shard_size=3 << 20, row_group_size=1 << 20)
    assert len(r.shards) > 1
    folder = volume.local(r.path[len(volume.vol) + 1:])
    offsets = np.fromfile(folder / ".offsets", dtype="<i8")
    shards = [(folder / name).read_bytes() for name in r.shards]
    import pyarrow.parquet as pq

    names = [n for name in r.shards for n in pq.read_table(folder / name, columns=["path"])["path"].to_pylist()]
    contents = [loose[volume.path(f"odd/{n}")] for n in names]
    per_shard = np.cumsum([0] + [pq.read_metadata(folder / name).num_rows for name in r.shards])
    for k, shard in enumerate(shards):
        a, b = per_shard[k], per_shard[k + 1]
        assert at_their_offsets(shard, contents[a:b], offsets[a:b])
    assert dict(read(volume.path("packed"))) == loose


def test_files_are_read_into_their_row_groups_buffer_and_a_late_spare_read_reads_nothing(volume):
    from air_core import FetchError
    from air_core.packs.write import _Buffers, _read_into

    buffers = _Buffers([6, 0, 5, 6, 6, 4])

    def write(g):  # all reads of row group g done: the writer takes its buffer, then is done with it
        data = buffers.take(g)
        buffers.written(g, data)
        return data.base

    into = buffers.get(0)
    assert buffers.get(0) is into and len(into) == 6  # one buffer for all reads of its row group
    p = volume.write("x/a.bin", b"abcdef")
    _read_into(str(p), "a.bin", p.stat().st_mtime_ns, memoryview(into)[:6])
    buffers.release(0)
    buffers.release(0)
    assert bytes(buffers.take(0)) == b"abcdef" and len(buffers.take(1)) == 0
    assert buffers.get(0) is None  # taken: a spare read that comes after has nothing to write into
    buffers.written(0, into)
    reused = buffers.get(2)
    assert len(reused) == 5 and reused.base is into.base  # a written row group's buffer holds a later one
    buffers.release(2)
    spare = buffers.get(3)  # a spare read, still writing when its row group is written
    assert write(3) is spare.base and buffers.get(4).base is not spare.base  # its buffer is left to it
    buffers.release(4)
    free = {id(write(2)), id(write(4))}
    assert id(buffers.get(5).base) in free  # the smallest free buffer that fits
    with pytest.raises(FetchError, match="changed after it was listed"):
        _read_into(str(p), "a.bin", p.stat().st_mtime_ns, memoryview(bytearray(5)))
    with pytest.raises(FetchError, match="changed after it was listed"):
        _read_into(str(p), "a.bin", p.stat().st_mtime_ns + 1, memoryview(bytearray(6)))


def test_ranks_and_workers_read_each_packed_file_once(volume):
    loose = loose_files(volume)
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    got = [p for r in range(3) for w in range(2)
           for p in read(volume.path("packed"), rank=r, world_size=3, worker=w, num_workers=2, shuffle=True)]
    assert sorted(got) == sorted(loose.items())
    counts = [len(FileStream(volume.path("packed"), rank=r, world_size=4, equalize="pad")) for r in range(4)]
    assert counts == [23] * 4


@pytest.mark.parametrize("new_grid", [(3, 2), (2, 3)])
def test_resume_mid_epoch_on_the_same_or_another_grid_is_exactly_once(volume, new_grid):
    loose = loose_files(volume)
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    opts = dict(shuffle=True, seed=3)
    first, states = [], []
    for r in range(3):
        for w in range(2):
            s = FileStream(volume.path("packed"), rank=r, world_size=3, worker=w, num_workers=2, **opts)
            it = iter(s)
            first += [next(it).path for _ in range(4 + r + w)]
            states.append(s.state_dict())
    world, workers = new_grid
    rest = []
    for r in range(world):
        for w in range(workers):
            s = FileStream(volume.path("packed"), rank=r, world_size=world, worker=w, num_workers=workers, **opts)
            s.load_state_dict(run_state(states))
            rest += [f.path for f in s]
    assert sorted(first + rest) == sorted(loose)
    same = FileStream(volume.path("packed"), rank=1, world_size=3, worker=1, num_workers=2, **opts)
    same.load_state_dict(states[3])  # one stream's own state, on its own grid
    whole = [f.path for f in FileStream(volume.path("packed"), rank=1, world_size=3, worker=1, num_workers=2, **opts)]
    assert [f.path for f in same] == whole[states[3]["consumed"]:]


def span_entries(cache_dir: Path) -> dict[str, int]:
    """{entry name: size} of the shards' ranges a cache holds (not the pack's listing and offsets)."""
    return {p.name: p.stat().st_size for p in (cache_dir / "objects").rglob("*")
            if p.is_file() and not p.name.startswith(".") and ".parquet" in p.name}


def test_each_node_fetches_only_its_ranks_row_groups_and_serves_the_next_epoch_itself(volume, tmp_path):
    from air_core.io.cache import Cache
    from air_core.packs.read import offsets, placement

    loose = loose_files(volume)
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    source = resolve_source(volume.path("packed"), mode="pack")
    shards, units = source.reader.shards(), source.reader.units()
    where = placement(units, offsets(source.reader.generation(), None), source.manifest.sizes)
    assert len(shards.paths) >= 3 and len(units) >= 9
    nodes = [tmp_path / f"node{r}" for r in range(3)]  # a cache folder each: three machines
    got, fetched, held_by = [], 0, np.zeros(len(units), int)
    for r, node in enumerate(nodes):
        items = []
        for w in range(2):
            s = FileStream(volume.path("packed"), rank=r, world_size=3, worker=w, num_workers=2, shuffle=True,
                           cache_dir=str(node))
            items += s.items()
            got += [(f.path, f.read_bytes()) for f in s]
        groups = np.unique(where.groups[items])
        held_by[groups] += 1
        cache = Cache(str(node))
        own = {os.path.basename(cache.entry_path(shards.volume_path(int(k)), int(shards.sizes[k]),
                                                 int(shards.mtimes[k]), (int(a), int(b))))
               for k, a, b in where.spans[groups]}
        held = span_entries(node)
        assert set(held) == own  # the ranges of its own row groups, and no others
        fetched += sum(held.values())
        for w in range(2):  # the next epoch, each worker reading what the other fetched: all from the cache
            s = FileStream(volume.path("packed"), rank=r, world_size=3, worker=1 - w, num_workers=2, shuffle=True,
                           cache_dir=str(node))
            s.set_epoch(1)
            assert sum(len(f.read_bytes()) for f in s) and s.cache.stats.misses == 0 and s.cache.stats.hits
        assert span_entries(node) == held
    assert sorted(got) == sorted(loose.items())
    # Every row group crosses the network once, but the (at most) two that a rank boundary splits, once per
    # node reading it: about the pack's file bytes in all (with their lengths between), not 3 x its shards.
    assert held_by.min() == 1 and (held_by == 2).sum() <= 2 and held_by.max() <= 2
    file_bytes = sum(map(len, loose.values()))
    assert file_bytes < fetched < 1.3 * file_bytes


NODE_READ = r"""
import json, sys
from air_core import FileStream
path, rank, epoch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = {"bytes": 0, "misses": 0}
for w in range(2):
    s = FileStream(path, rank=rank, world_size=3, worker=w, num_workers=2, shuffle=True)
    s.set_epoch(epoch)
    out["bytes"] += sum(len(f.read_bytes()) for f in s)
    out["misses"] += s.cache.stats.misses
print(json.dumps(out))
"""


@pytest.mark.slow
def test_three_nodes_open_each_row_group_once_and_a_second_epoch_opens_no_shard(volume, netvol_so, tmp_path):
    loose = loose_files(volume)
    r = pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    shard_paths = {str(volume.local(r.path[len(volume.vol) + 1:]) / name) for name in r.shards}
    read_bytes = fetched = range_opens = 0
    for rank in range(3):
        node = tmp_path / f"node{rank}"
        for epoch in (0, 1):  # a process each: the second epoch is a later job (or worker) on the node
            trace = tmp_path / f"trace{rank}.{epoch}"
            out = subprocess.run([sys.executable, "-c", NODE_READ, volume.path("packed"), str(rank), str(epoch)],
                                 env={**slow_env(netvol_so, volume, trace), "AIR_CACHE_DIR": str(node)},
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr[-3000:]
            got = json.loads(out.stdout)
            shard_opens = sum(n for p, n in opens(trace).items() if p in shard_paths)
            if epoch == 0:
                read_bytes += got["bytes"]
                range_opens += shard_opens
                fetched += sum(span_entries(node).values())
                assert shard_opens == got["misses"] == len(span_entries(node)) > 0  # a range, an open
            else:
                assert shard_opens == got["misses"] == 0
    assert read_bytes == sum(map(len, loose.values())) < fetched < 1.3 * read_bytes
    # Each row group opened once, but the two a rank boundary splits: once on each node that reads them.
    assert range_opens <= len(resolve_source(volume.path("packed"), mode="pack").reader.units()) + 2


@pytest.mark.slow
def test_a_range_fetch_killed_midway_is_never_served(volume, netvol_so):
    blobs = {f"big/c/{k}.bin": os.urandom(1 << 20) for k in range(3)}
    for rel, data in blobs.items():
        volume.write(rel, data)
    pack(volume.path("big"), volume.path("packed"))  # one row group of 3 MiB
    code = "import sys; from air_core import FileStream\nfor f in FileStream(sys.argv[1]): pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code, volume.path("packed")],
                            env=slow_env(netvol_so, volume, NETVOL_MBPS="1"))
    cache = Path(os.environ["AIR_CACHE_DIR"])
    wait_for(lambda: proc.poll() is not None or any(p.name.endswith(".part") and ".parquet" in p.name and
                                                     p.stat().st_size for p in (cache / "objects").rglob("*")),
             30, "the range fetch to start")
    assert proc.poll() is None, "the fetch ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert span_entries(cache) == {}  # only the .part is left, and it is never an entry
    stream = FileStream(volume.path("packed"))
    assert {f.path: f.read_bytes() for f in stream} == {volume.path(rel): data for rel, data in blobs.items()}
    assert stream.cache.stats.misses == 1 and len(span_entries(cache)) == 1


def test_a_state_over_the_loose_files_does_not_resume_the_pack(volume):
    loose_files(volume)
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD)
    state = FileStream(volume.path("d")).state_dict()
    with pytest.raises(Exception, match="different listing"):
        FileStream(volume.path("packed")).load_state_dict(state)


def test_a_changed_source_makes_a_new_generation_that_readers_take_once_complete(volume, tmp_path):
    loose_files(volume)
    first = pack(volume.path("d"), volume.path("packed"), shard_size=SHARD)
    reader = FileStream(volume.path("packed"))  # resolved now: keeps reading its generation
    volume.write("d/class0/new.bin", b"a new file")
    died = subprocess.run([sys.executable, str(RUN), volume.path("d"), volume.path("packed"), str(SHARD), "2"],
                          capture_output=True, text=True)
    assert died.returncode == -9
    assert pack_folder(volume.path("packed")) == first.path  # half a generation is never served
    second = json.loads(subprocess.run([sys.executable, str(RUN), volume.path("d"), volume.path("packed"),
                                        str(SHARD)], capture_output=True, text=True, check=True).stdout)
    assert second["path"] != first.path and not second["skipped"]
    assert pack_folder(volume.path("packed")) == second["path"]
    now = dict(read(volume.path("packed")))
    assert now[volume.path("d/class0/new.bin")] == b"a new file" and len(now) == 91
    assert len([f.path for f in reader]) == 90  # the previous generation stays for readers still on it


@pytest.mark.parametrize("kill_at", [0, 1, 3, 6])
def test_a_pack_killed_at_any_point_resumes_where_it_stopped(volume, kill_at):
    loose = loose_files(volume)
    args = [sys.executable, str(RUN), volume.path("d"), volume.path("packed"), str(SHARD)]
    died = subprocess.run(args + [str(kill_at)], capture_output=True, text=True)
    assert died.returncode == -9
    with pytest.raises(OptionError, match="is not a pack"):  # nothing published yet
        resolve_source(volume.path("packed"), mode="pack")
    done = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    assert done["written"] == len(done["shards"]) - kill_at // 2  # a shard and its offsets: two copies
    assert dict(read(volume.path("packed"))) == loose


@pytest.mark.slow
def test_a_file_that_stays_unreadable_fails_the_pack_and_leaves_no_partial_shard(volume, netvol_so):
    loose = loose_files(volume)
    # Every open of f00040.bin fails on the volume (netvol): it lies in the second shard, copied onto the volume
    # as it is built.
    env = slow_env(netvol_so, volume, NETVOL_FAIL_MATCH="f00040")
    code = ("import sys; from air_core import pack; "
            "pack(sys.argv[1], sys.argv[2], shard_size=int(sys.argv[3]), row_group_size=int(sys.argv[3]) // 4)")
    out = subprocess.run([sys.executable, "-c", code, volume.path("d"), volume.path("packed"), str(SHARD)],
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("air_core.errors.FetchError") and "f00040.bin" in last, out.stderr[-3000:]
    left = sorted(p.name for p in volume.local("packed").rglob("*") if p.is_file())
    assert left == [".part-00000.offsets", "part-00000.parquet"]  # the first shard, whole; nothing of the second
    again = pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    assert again.written == len(again.shards) - 1 and dict(read(volume.path("packed"))) == loose


def test_shards_are_copied_onto_the_volume_where_sendfile_copies_only_to_sockets(volume, monkeypatch):
    import errno

    def sendfile(*args):
        raise OSError(errno.ENOTSOCK, "Socket operation on non-socket")  # macOS, for a file

    loose = loose_files(volume)
    with monkeypatch.context() as m:
        m.setattr(os, "sendfile", sendfile)
        pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    assert dict(read(volume.path("packed"))) == loose


@pytest.mark.slow
def test_packing_passes_under_object_storage_semantics(volume, netvol_so, tmp_path):
    loose = loose_files(volume)
    env = {**os.environ, "LD_PRELOAD": netvol_so, "NETVOL_STRICT": "1", "NETVOL_PREFIX": f"{volume.root}/",
           "NETVOL_OPEN_MS": "0", "NETVOL_LIST_MS": "0"}
    args = [sys.executable, str(RUN), volume.path("d"), volume.path("packed"), str(SHARD)]
    first = json.loads(subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout)
    volume.write("d/class1/more.bin", b"more")
    second = json.loads(subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout)
    assert second["path"] != first["path"] and second["files"] == 91
    got = dict(read(volume.path("packed")))
    assert {p: got[p] for p in loose} == loose


def test_bad_inputs_say_what_to_do(volume):
    loose_files(volume)
    with pytest.raises(VolumePathError, match="inside the source"):
        pack(volume.path("d"), volume.path("d/packed"))
    (volume.local("empty")).mkdir()
    with pytest.raises(EmptyVolumeError, match="holds no file"):
        pack(volume.path("empty"), volume.path("packed"))
    volume.write("other/x.txt", "x")
    with pytest.raises(VolumePathError, match="not a pack made by air-data pack"):
        pack(volume.path("d"), volume.path("other"))
    with pytest.raises(OptionError, match="is not a pack.*air-data pack"):
        resolve_source(volume.path("d"), mode="pack")
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD)
    with pytest.raises(OptionError, match="read whole"):
        FileStream(volume.path("packed"), include="*.bin")
    with pytest.raises(OptionError, match=r"balance= applies to loose files: /Volumes/main/ml/raw/packed is a pack"):
        FileStream(volume.path("packed"), balance="stride")
    (volume.local("packed") / POINTER).write_text("{}")
    with pytest.raises(VolumePathError, match="not a pointer written by air-data pack"):
        FileStream(volume.path("packed"))


def test_mode_parquet_reads_the_shards_rows(volume):
    loose_files(volume)
    r = pack(volume.path("d"), volume.path("packed"), shard_size=SHARD)
    s = resolve_source(volume.path("packed"), mode="parquet")
    assert s.mode == "parquet" and s.path == r.path and sum(u.num_rows for u in s.reader.units()) == 90


def test_cli_packs_with_a_progress_bar_and_a_summary(volume, capsys):
    from air_core.cli import main

    loose_files(volume)
    assert main(["pack", volume.path("d"), volume.path("packed"), "--shard-size", "40k"]) == 0
    assert "packed 90 files" in capsys.readouterr().out
    assert main(["pack", volume.path("d"), volume.path("packed"), "--shard-size", "40k"]) == 0
    assert "nothing written" in capsys.readouterr().out
    assert main(["pack", volume.path("d"), volume.path("d/in")]) == 2
    assert "inside the source" in capsys.readouterr().err
    assert (volume.local("packed") / GENERATIONS).is_dir()


# -- front doors ------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [True, False])
def test_hf_reads_a_pack_as_the_loose_files(volume, streaming):
    datasets = pytest.importorskip("datasets")
    import air_hf  # noqa: F401

    loose_files(volume)
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)

    def rows(path, **kw):
        ds = datasets.load_dataset("uc-volume", data_dir=path, split="train", streaming=streaming, decode="bytes",
                                   labels=True, **kw)
        return sorted((r["path"], r["size"], r["bytes"], r["label"]) for r in ds)

    assert rows(volume.path("packed")) == rows(volume.path("d"))
    assert rows(volume.path("packed"), shuffle=True, seed=2) == rows(volume.path("d"))
    with pytest.raises(OptionError, match="is not a pack"):
        datasets.load_dataset("uc-volume", data_dir=volume.path("d"), mode="pack", streaming=streaming)


def test_hf_decodes_packed_images_and_text(volume):
    datasets = pytest.importorskip("datasets")
    import air_hf  # noqa: F401
    from air_core.cli.demo import build_volume

    build_volume(str(volume.root), images=12, texts=6)
    pack("/Volumes/demo/ml/raw/images", "/Volumes/demo/ml/raw/packs/images")
    pack("/Volumes/demo/ml/raw/texts", "/Volumes/demo/ml/raw/packs/texts")
    for folder, decode in (("images", "image"), ("texts", "text")):
        loose, packed = (datasets.load_dataset("uc-volume", data_dir=d, split="train", streaming=True, decode=decode,
                                               labels=True)
                         for d in (f"/Volumes/demo/ml/raw/{folder}", f"/Volumes/demo/ml/raw/packs/{folder}"))
        a = {r["path"]: r for r in loose}
        b = {r["path"]: r for r in packed}
        assert a.keys() == b.keys() and all(b[p]["label"] == a[p]["label"] for p in a)
        if decode == "image":
            assert all(b[p]["image"].tobytes() == a[p]["image"].tobytes() for p in a)
        else:
            assert all(b[p]["text"] == a[p]["text"] for p in a)


@pytest.mark.slow
def test_hf_dataloader_workers_over_a_pack_read_each_file_once(volume):
    datasets = pytest.importorskip("datasets")
    torch = pytest.importorskip("torch")
    import air_hf  # noqa: F401

    loose = loose_files(volume)
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    ds = datasets.load_dataset("uc-volume", data_dir=volume.path("packed"), split="train", streaming=True,
                               decode="bytes", num_workers=2)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert sorted((r["path"], r["bytes"]) for r in loader) == sorted(loose.items())


@pytest.mark.slow
def test_ray_reads_a_pack_as_the_loose_files(volume, ray_cluster):
    from air_ray import read_uc_volume

    loose = loose_files(volume)
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    rows = read_uc_volume(volume.path("packed"), include_bytes=True).take_all()
    assert sorted((r["path"], r["bytes"]) for r in rows) == sorted(loose.items())
    assert all(r["size"] == len(r["bytes"]) and r["local_path"] == "" for r in rows)
    counts = [read_uc_volume(volume.path("packed"), rank=r, world_size=4, equalize="pad").count() for r in range(4)]
    assert counts == [23] * 4


@pytest.mark.slow
def test_torch_dataset_over_a_pack_yields_named_in_memory_files(volume):
    pytest.importorskip("torch")
    from air_core.torch import DataLoader, PackedFile, UCVolumeDataset

    loose = loose_files(volume)
    pack(volume.path("d"), volume.path("packed"), shard_size=SHARD, row_group_size=SHARD // 4)
    loader = DataLoader(UCVolumeDataset(volume.path("packed"), shuffle=True), batch_size=None, num_workers=2)
    got = [(f.name, f.read()) for f in loader]
    assert all(isinstance(f, PackedFile) for f in UCVolumeDataset(volume.path("packed")))
    assert sorted(got) == sorted(loose.items())  # each file once, whole


@pytest.mark.slow
def test_notebook_runs(tmp_path, monkeypatch):
    """notebooks/pack.ipynb runs from top to bottom on the venv's python3 kernel."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    monkeypatch.delenv("AIR_VOLUMES_ROOT", raising=False)
    monkeypatch.delenv("AIR_CACHE_DIR", raising=False)
    nb = nbformat.read(Path(__file__).resolve().parent.parent / "notebooks" / "pack.ipynb", as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "packed 300 files" in printed and "writes nothing: True" in printed
    assert "same rows as the loose files: True | 300 rows" in printed and "nothing twice: True" in printed
    assert "a reader made before still reads 300 files; a new one reads 301" in printed
