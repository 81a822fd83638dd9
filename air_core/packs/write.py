"""Pack a volume folder of small files into large Parquet shards, which readers stream at bandwidth speed.

Every open on a volume is a network round trip, so small files are read at
(reads in flight / latency) files per second whatever the bandwidth; a shard
of 1 GiB is read at bandwidth speed. `pack` reads the files through the core
(concurrent reads, retried), writes each shard on local disk, and copies it
onto the volume in one sequential pass under a hidden name, then renames it
into place: the volume sees only whole files written front to back and file
renames, which object storage offers (no links, locks, folder renames,
appends or seeks). The copy follows the local shard as its row groups are
written, so that copying overlaps reading, the last shard's copy included.

Each packed file is one row: `path` (relative to the source folder), `size`,
`mtime` (nanoseconds since the epoch), `bytes`, and `label` (the parent
folder's name) when every file sits in a class folder. Any Parquet reader
reads the shards: `load_dataset("parquet")`, `ray.data.read_parquet`, Spark,
DuckDB. This library's front doors read a pack as if it were the loose files
(see `air_core.packs.store` for the layout and how readers find it).

Row groups hold about 16 MiB of files by default: the unit that readers
split among ranks and workers and decode at once. Smaller groups cost more
footer and per-read overhead (a 1 GiB shard of 16 MiB groups has 64); larger
ones hold more memory per DataLoader worker (a decoded group and the next)
and split less evenly over 48 streams per node. 16 MiB is also the range the
node cache copies a large file by, and `export_delta`'s row group size.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import secrets
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from queue import SimpleQueue
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from ..errors import EmptyVolumeError, FetchError, VolumePathError
from ..io import transport, volume
from ..io.fetch import ordered_map, retrying
from ..io.kernel_copy import send_range
from ..io.node_lock import node_lock
from ..manifest import Manifest
from .layout import layout
from .records import Rows as RecordRows, cut, read_records, records_settings, row_counts
from .records import write_shards as write_record_shards
from .store import GENERATIONS, INDEX, MARKER, OFFSETS, POINTER, POINTER_TMP, marker, offsets_name, point_at, read_pointer, shard_name, write_whole
from .pages import value_offsets

if TYPE_CHECKING:
    import pyarrow as pa

    from ..io.files_api import FilesApi
    from ..source import Source

DEFAULT_SHARD_SIZE = 1 << 30
DEFAULT_ROW_GROUP_SIZE = 16 << 20
DEFAULT_THREADS = 64
_READ_AHEAD_BYTES = 256 << 20
_BINARY_MAX = 2**31 - 1
# `bytes` uncompressed and without a dictionary: each file is stored whole, where `_offsets` finds it.
_WRITER_OPTIONS = dict(compression={"bytes": "none"}, use_dictionary=["label"],
                       write_statistics=["path", "size", "mtime", "label"])


@dataclass(frozen=True)
class PackResult:
    """What a pack holds, and what this run did.

    Attributes:
        dest: the destination's volume path (what readers are given).
        path: the volume path of this generation's own folder (give it to
            readers that list a folder: `load_dataset("parquet", data_dir=...)`).
        files: files packed.
        bytes: bytes of the files packed.
        shards: the shards' file names in `path`.
        written: shards this run wrote (fewer than all when it resumed a killed run).
        skipped: True when `dest` already held this pack of the unchanged source: nothing was written.
        records: True for a pack of records that name media (`air_core.packs.records`): `files` counts the
            records, `bytes` their media's bytes.
        left_out: with on_error="skip", where each record this run left out lay ("<records file>, line N").
    """

    dest: str
    path: str
    files: int
    bytes: int
    shards: tuple[str, ...]
    written: int
    skipped: bool
    records: bool = False
    left_out: tuple[str, ...] = ()


def pack_files(s: volume.VolumePath, d: volume.VolumePath, manifest: Manifest, settings: dict, *, threads: int,
               progress: bool) -> PackResult:
    """`air_core.pack` of the files of `s` (listed: `manifest`) into `d`: a row per file. `settings`: the
    shard and row group sizes in bytes and the globs, which name the generation with the listing."""
    name = _generation_name(manifest.root, manifest.fingerprint, settings)
    pointer = _current(d)
    if _holds(d, pointer, name):
        return _result(d, name, manifest, written=0, skipped=True)
    with node_lock(d.local):
        if _holds(d, _current(d), name):  # another process of this node packed it while this one waited
            return _result(d, name, manifest, written=0, skipped=True)
        folder = _generation_folder(d, name)
        shards = layout(manifest.sizes, settings["shard_size"], settings["row_group_size"])
        todo = [k for k in range(len(shards)) if not transport.is_file(os.path.join(folder, shard_name(k)))]
        labels = all("/" in p for p in manifest.paths)
        _write_shards(manifest, shards, todo, folder, labels=labels, threads=threads, progress=progress)
        _write_index(manifest, folder, len(shards))
        listed = [{"name": shard_name(k), "size": transport.stat(os.path.join(folder, shard_name(k)))[0],
                   "row_groups": [[b - a, int(manifest.sizes[a:b].sum())] for a, b in groups]}
                  for k, groups in enumerate(shards)]
        mark = marker(s.path, manifest.fingerprint, len(manifest), labels, listed, settings)
        write_whole(os.path.join(folder, MARKER), json.dumps(mark).encode())
        point_at(d, name)
        return _result(d, name, manifest, written=len(todo), skipped=False)


def check_places(s: volume.VolumePath, d: volume.VolumePath) -> None:
    """Refuse a source that is not a folder, and a destination that is a volume's root, hidden, or inside the
    source (or holding it)."""
    volume.require_dir(s)
    if d.path == d.volume:
        raise VolumePathError(f"{d.path} is a volume's root: pack into a folder inside it, "
                              f"e.g. {d.volume}/packs/<name>")
    if os.path.basename(d.path)[0] in "._":
        raise VolumePathError(f"{d.path}: a destination starting with '.' or '_' is skipped by listings; "
                              "choose a name that readers will see")
    real_s, real_d = (p.local if transport.remote(p.local) is not None  # no links over the Files API
                      else os.path.realpath(p.local) for p in (s, d))
    if real_d == real_s or real_d.startswith(real_s + "/"):
        raise VolumePathError(f"{d.path} is inside the source {s.path}: the pack would be packed into itself "
                              "next time; choose a destination outside the source")
    if real_s.startswith(real_d + "/"):
        raise VolumePathError(f"the source {s.path} is inside the destination {d.path}: choose a destination "
                              "outside the source")


def _current(d: volume.VolumePath) -> dict | None:
    """The destination's pointer, or None when it has none yet; refuses a folder that holds anything else."""
    pointer = read_pointer(d)
    if pointer is not None:
        return pointer
    there = (os.path.lexists(d.local) if transport.remote(d.local) is None
             else transport.is_dir(d.local) or transport.is_file(d.local))
    if not there:
        return None
    if not transport.is_dir(d.local) or any(n not in (GENERATIONS, POINTER) and not n.startswith(POINTER_TMP)
                                            for n in transport.listdir(d.local)):
        raise VolumePathError(f"{d.path} already exists and is not a pack made by air-data pack: remove it, "
                              "or choose another destination")
    return None


def _holds(d: volume.VolumePath, pointer: dict | None, name: str) -> bool:
    return (pointer is not None and pointer["generation"] == f"{GENERATIONS}/{name}"
            and transport.is_file(os.path.join(d.local, GENERATIONS, name, MARKER)))


def _generation_name(root: str, fingerprint: str, settings: dict) -> str:
    """Named for what it packs (the source folder, a fingerprint of its contents), so that a killed run finds its
    folder again."""
    key = json.dumps({"source": root, "fingerprint": fingerprint, **settings}, sort_keys=True)
    return "g-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def pack_records(source: Source, listing: Manifest, d: volume.VolumePath, settings: dict, *, threads: int,
                 on_error: str, progress: bool) -> PackResult:
    """`air_core.pack` of the records `source` resolves (the folder listed: `listing`): a row per record, its media's
    bytes in it (see `air_core.packs.records`)."""
    found = read_records(source, listing, threads=threads, on_error=on_error)
    if not found.kept:
        raise EmptyVolumeError(f"{listing.root} holds no record to pack: every one was left out "
                               f"({len(found.skipped)}), or its records files hold none")
    settings = {**settings, **records_settings(source), "on_error": on_error}
    name = _generation_name(listing.root, found.key(), settings)
    if _holds(d, _current(d), name):
        return _records_result(d, name, written=0, skipped=True, left_out=found.skipped)
    with node_lock(d.local):
        if _holds(d, _current(d), name):  # another process of this node packed it while this one waited
            return _records_result(d, name, written=0, skipped=True, left_out=found.skipped)
        folder = _generation_folder(d, name)
        sizes = found.sizes()
        shards = cut([f for f, _ in found.kept], sizes, settings["shard_size"], settings["row_group_size"])
        todo = [k for k in range(len(shards)) if not transport.is_file(os.path.join(folder, shard_name(k)))]
        plan = source.reader.plan()
        largest = max((int(sizes[a:b].sum()) for groups in shards for a, b in groups), default=0)
        write_record_shards(RecordRows(found, plan, largest), shards, todo, folder, threads=threads,
                            on_error=on_error, skipped=found.skipped, progress=progress)
        _write_index(found.manifest, folder, None)
        names = [shard_name(k) for k in range(len(shards))]
        counts = row_counts(folder, names)
        listed = [{"name": n, "size": transport.stat(os.path.join(folder, n))[0],
                   "row_groups": [[rows, int(sizes[a:b].sum()), found.kept[a][0]]
                                  for rows, (a, b) in zip(counted, groups)]}
                  for n, counted, groups in zip(names, counts, shards)]
        kinds = {m.name: m.kind for m in plan.media}
        mark = marker(source.path, found.manifest.fingerprint, sum(map(sum, counts)), False, listed, settings, kinds)
        write_whole(os.path.join(folder, MARKER), json.dumps(mark).encode())
        point_at(d, name)
        return _records_result(d, name, written=len(todo), skipped=False, left_out=found.skipped)


def _generation_folder(d: volume.VolumePath, name: str) -> str:
    """The local path of generation `name`'s folder in `d`, made."""
    folder = os.path.join(d.local, GENERATIONS, name)
    try:
        transport.make_dirs(folder)
        volume.check_inside(d, folder)
    except OSError as e:
        raise VolumePathError(f"cannot write a pack into {d.path}: {e.strerror or e}; "
                              "choose a destination you can write to") from None
    return folder


def _records_result(d: volume.VolumePath, name: str, *, written: int, skipped: bool,
                    left_out: list[str]) -> PackResult:
    m = json.loads(transport.read_file(os.path.join(d.local, GENERATIONS, name, MARKER)))
    return PackResult(dest=d.path, path=f"{d.path}/{GENERATIONS}/{name}", files=m["files"],
                      bytes=sum(g[1] for s in m["shards"] for g in s["row_groups"]),
                      shards=tuple(s["name"] for s in m["shards"]), written=written, skipped=skipped, records=True,
                      left_out=tuple(left_out))


def _result(d: volume.VolumePath, name: str, manifest: Manifest, *, written: int, skipped: bool) -> PackResult:
    folder = os.path.join(d.local, GENERATIONS, name)
    shards = tuple(s["name"] for s in json.loads(transport.read_file(os.path.join(folder, MARKER)))["shards"])
    return PackResult(dest=d.path, path=f"{d.path}/{GENERATIONS}/{name}", files=len(manifest),
                      bytes=int(manifest.sizes.sum()), shards=shards, written=written, skipped=skipped)


def _write_shards(manifest: Manifest, shards: list[list[tuple[int, int]]], todo: list[int], folder: str, *,
                  labels: bool, threads: int, progress: bool) -> None:
    """Build each shard in `todo` on local disk and copy it onto the volume as it is built."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root, local_root = manifest.root, volume.parse(manifest.root).local
    remote = transport.remote(local_root)
    paths, sizes, mtimes = manifest.paths, manifest.sizes, manifest.mtimes
    largest_group = max((int(sizes[a:b].sum()) for groups in shards for a, b in groups), default=0)
    schema = _schema(labels, pa.binary() if largest_group <= _BINARY_MAX else pa.large_binary())

    groups = [(a, b) for k in todo for a, b in shards[k]]
    buffers = _Buffers([int(sizes[a:b].sum()) for a, b in groups])

    def files() -> Iterator[tuple[tuple[int, int, int, int], int]]:
        """(listing position, row group, where in its buffer, size) of each file to pack, and its size."""
        for g, (a, b) in enumerate(groups):
            group_sizes = sizes[a:b].tolist()
            starts = itertools.accumulate(group_sizes, initial=0)
            for i, at, size in zip(range(a, b), starts, group_sizes):
                yield (i, g, at, size), size

    def read(file: tuple[int, int, int, int]) -> None:
        """Read a file to pack into its row group's buffer, at its place there."""
        i, g, at, size = file
        into = buffers.get(g)
        if into is None:  # a spare read (see ordered_map's hedging) of a row group already written
            return
        try:
            view, rel, mtime = memoryview(into)[at:at + size], paths[i], int(mtimes[i])
            if remote is None:
                retrying(lambda: _read_into(f"{local_root}/{rel}", f"{root}/{rel}", mtime, view), f"{root}/{rel}")
            else:
                retrying(lambda: _download_into(remote, f"{root}/{rel}", mtime, view), f"{root}/{rel}")
        finally:
            buffers.release(g)

    total = sum(buffers.sizes)
    done = ordered_map(read, files(), threads=threads, max_ahead=4 * threads, max_bytes=_READ_AHEAD_BYTES)
    stage = tempfile.mkdtemp(prefix="air-pack-")
    copies: list[Future] = []
    g = 0
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="air-pack-copy") as copier, \
                tqdm(total=total, unit="B", unit_scale=True, desc="pack", disable=not progress) as bar:
            for k in todo:
                local = os.path.join(stage, shard_name(k))
                first, last = shards[k][0][0], shards[k][-1][1]
                grown: SimpleQueue = SimpleQueue()  # how far the local shard is written: the copy follows it
                copies.append(copier.submit(_copy_shard, local, grown, sizes[first:last], folder, k))
                end = _ABANDONED
                try:
                    with pq.ParquetWriter(local, schema, **_WRITER_OPTIONS) as writer:
                        for a, b in shards[k]:
                            for _ in range(a, b):
                                next(done)
                            data = buffers.take(g)
                            writer.write_table(_rows(manifest, a, b, data, schema), row_group_size=b - a)
                            grown.put(os.path.getsize(local))  # the row group is on disk now
                            buffers.written(g, data)
                            g += 1
                            bar.update(len(data))
                    end = _WHOLE
                finally:
                    grown.put(end)
                while len(copies) > 1:  # at most one shard copying while the next one is built
                    copies.pop(0).result()
            for c in copies:
                c.result()
    finally:
        shutil.rmtree(stage, ignore_errors=True)


class _Buffers:
    """Each row group's files, read side by side into one buffer, which becomes its `bytes` column as is.

    A row group's buffer is made by the first read into it, and taken by
    the writer once all its files are in; a read of it after that (a spare
    read, hedging one that was slow) is told so, and reads nothing. Once
    its row group is written, a buffer holds another one: new memory costs
    a page fault and the kernel zeroing each page, about a tenth of
    packing's work. A buffer that a spare read may still write into is
    left to that read instead.
    """

    def __init__(self, sizes: list[int], keep: int = 4) -> None:
        self.sizes, self._keep = sizes, keep
        self._made: dict[int, np.ndarray] = {}
        self._busy: dict[int, int] = {}  # row group -> reads writing into its buffer now
        self._free: list[np.ndarray] = []
        self._taken = 0
        # Row groups are cut about equal: most fit a buffer made for any other, with a little to spare.
        self._least = int(sorted(sizes)[len(sizes) * 9 // 10] * 1.05) if sizes else 0
        self._lock = threading.Lock()

    def get(self, g: int) -> np.ndarray | None:
        """Row group `g`'s buffer to read into, None once it is taken; `release(g)` when done with it."""
        with self._lock:
            if g < self._taken:
                return None
            made = self._made.get(g)
            if made is None:
                made = self._made[g] = self._new(self.sizes[g])
            self._busy[g] = self._busy.get(g, 0) + 1
            return made

    def release(self, g: int) -> None:
        with self._lock:
            self._busy[g] -= 1
            if not self._busy[g]:
                del self._busy[g]

    def take(self, g: int) -> np.ndarray:
        """Row group `g`'s buffer, all its files read into it."""
        with self._lock:
            self._taken = g + 1
            made = self._made.pop(g, None)
            return self._new(0) if made is None else made

    def written(self, g: int, buffer: np.ndarray) -> None:
        """Row group `g` is written: its buffer may hold another one."""
        with self._lock:
            if g not in self._busy and len(self._free) < self._keep:
                self._free.append(buffer if buffer.base is None else buffer.base)

    def _new(self, size: int) -> np.ndarray:
        fits = [k for k, b in enumerate(self._free) if len(b) >= size]
        if fits:
            whole = self._free.pop(min(fits, key=lambda k: len(self._free[k])))
        else:
            whole = np.empty(max(size, self._least), dtype=np.uint8)  # not zeroed: all read over
        return whole[:size]


def _download_into(remote: FilesApi, volume_path: str, mtime_ns: int, view: memoryview) -> None:
    """`_read_into` over the Files API: ranged requests, which check the listed version."""
    def write(chunk: memoryview, at: int) -> None:
        view[at:at + len(chunk)] = chunk

    remote.read(volume_path, 0, len(view), write, size=len(view), mtime_ns=mtime_ns)


def _read_into(source: str, volume_path: str, mtime_ns: int, view: memoryview) -> None:
    """Read `source` whole into `view`, checking it is the listed version (its size is the view's)."""
    fd = os.open(source, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if st.st_size != len(view) or st.st_mtime_ns != mtime_ns:
            raise FetchError(0, f"{volume_path} changed after it was listed (size {len(view)} -> {st.st_size}); "
                                "pack again to pack the new version")
        n = 0
        while n < len(view) and (got := os.readv(fd, [view[n:]])):
            n += got
    finally:
        os.close(fd)
    if n != len(view):
        raise FetchError(0, f"{volume_path} changed while being read ({n} of {len(view)} bytes)")


def _schema(labels: bool, binary: pa.DataType) -> pa.Schema:
    import pyarrow as pa

    fields = [pa.field("path", pa.string()), pa.field("size", pa.int64()), pa.field("mtime", pa.int64()),
              pa.field("bytes", binary)]
    return pa.schema(fields + ([pa.field("label", pa.string())] if labels else []))


def _rows(manifest: Manifest, a: int, b: int, data: np.ndarray, schema: pa.Schema) -> pa.Table:
    """Rows `a` to `b` of the listing, whose files lie side by side in `data`: it is their column, not a copy."""
    import pyarrow as pa

    paths, sizes = manifest.paths[a:b], manifest.sizes[a:b]
    binary = schema.field("bytes").type
    ends = np.zeros(b - a + 1, dtype=np.int64 if binary == pa.large_binary() else np.int32)
    np.cumsum(sizes, out=ends[1:])
    contents = pa.Array.from_buffers(binary, b - a, [None, pa.py_buffer(ends), pa.py_buffer(data)])
    cols = {"path": paths, "size": sizes, "mtime": manifest.mtimes[a:b], "bytes": contents}
    if "label" in schema.names:
        cols["label"] = [p.rsplit("/", 2)[-2] for p in paths]
    return pa.Table.from_pydict(cols, schema=schema)


_WHOLE, _ABANDONED = -1, -2  # what the builder of a shard tells its copy last: it is complete, or it failed


def _copy_shard(local: str, grown: SimpleQueue, sizes: Sequence[int] | None, folder: str, k: int) -> None:
    """Copy shard `k` onto the volume while it is built, then its files' offsets, then give it its name.

    The shard is copied front to back as its row groups are written, so
    that the copy of the last shard overlaps reading too; it gets its name
    only after its offsets have theirs: a shard that is there always has them.
    `sizes`: its files' sizes; None for a shard of records, which has no offsets (its rows are read as Parquet).
    """
    target = os.path.join(folder, shard_name(k))
    if transport.remote(target) is not None:  # whole-object PUTs: the shard once built, after its offsets
        while (end := grown.get()) not in (_WHOLE, _ABANDONED):  # how far it is built: no use here
            pass
        if end == _ABANDONED:
            return
        _copy_offsets(local, sizes, folder, k)
        transport.write_file(target, local)
        os.unlink(local)
        return
    tmp = _stream_onto_volume(local, grown, target)
    if tmp is None:  # building it failed: that error is raised where it happened
        return
    _copy_offsets(local, sizes, folder, k)
    _publish_shard(tmp, target)
    os.unlink(local)


def _copy_offsets(local: str, sizes: Sequence[int] | None, folder: str, k: int) -> None:
    """Shard `k`'s files' offsets, found in its local copy `local`, copied onto the volume (none for records)."""
    if sizes is None:
        return
    offsets_file = f"{local}.offsets"
    np.asarray(value_offsets(local, "bytes", sizes), dtype="<i8").tofile(offsets_file)
    _copy_onto_volume(offsets_file, os.path.join(folder, offsets_name(k)))


def _stream_onto_volume(local: str, grown: SimpleQueue, target: str) -> str | None:
    """Copy `local`, which is being written, onto the volume front to back under a hidden name, as it grows.

    `grown` says how far `local` is written, then `_WHOLE` once it is
    complete (or `_ABANDONED`). Returns the hidden name once the copy is
    whole, None if abandoned (the partial copy is removed). The hidden name
    is unique to this run: a copy killed midway is never taken for a shard,
    nor written into by the next run.
    """
    end = grown.get()
    if end == _ABANDONED:
        return None
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.part")
    with open(local, "rb", buffering=0) as src, open(tmp, "wb", buffering=0) as out:
        copied = 0
        while True:
            if end == _ABANDONED:
                out.close()
                os.unlink(tmp)
                return None
            stop = os.fstat(src.fileno()).st_size if end == _WHOLE else end
            copied += send_range(src.fileno(), out.fileno(), copied, stop)
            if copied < stop:
                raise OSError(f"{local} ended at {copied} bytes while being copied onto the volume")
            if end == _WHOLE:
                return tmp
            end = grown.get()


def _publish_shard(tmp: str, target: str) -> None:
    os.replace(tmp, target)


def _copy_onto_volume(local: str, target: str) -> None:
    """Copy a local file onto the volume front to back under a hidden name, rename it into place, drop the local one.

    The hidden name is unique to this run: a copy killed midway is never
    taken for a shard, nor written into by the next run.
    """
    if transport.remote(target) is not None:  # a PUT is whole or nothing: no hidden name
        transport.write_file(target, local)
        os.unlink(local)
        return
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.part")
    shutil.copyfile(local, tmp)  # front to back, inside the kernel where it can (sendfile): no Python buffer
    os.replace(tmp, target)
    os.unlink(local)


def _write_index(manifest: Manifest, folder: str, shards: int | None) -> None:
    """The packed files' listing, and where each sits in its `shards` shards, which readers plan and read from
    (`shards` None: a pack of records, whose listing lists the records files, and which has no offsets)."""
    with tempfile.TemporaryDirectory(prefix="air-pack-") as stage:
        local = os.path.join(stage, INDEX)
        manifest.save(local)
        _copy_onto_volume(local, os.path.join(folder, INDEX))
        if shards is None:
            return
        local = os.path.join(stage, OFFSETS)
        with open(local, "wb") as out:
            for k in range(shards):
                out.write(transport.read_file(os.path.join(folder, offsets_name(k))))
        _copy_onto_volume(local, os.path.join(folder, OFFSETS))


__all__ = ["DEFAULT_ROW_GROUP_SIZE", "DEFAULT_SHARD_SIZE", "PackResult", "check_places", "pack_files", "pack_records"]
