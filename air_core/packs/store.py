"""A pack on a volume: its folders, its markers, and how readers find the current generation.

A pack is published as `export_delta` publishes an export (see
`air_core.delta.publication`), with only what object storage offers: each
generation is written into a folder of its own, and a pointer file, written
whole under a temporary name and renamed over the previous one, names the
current generation:

    dst/_air_pack.json                       the pointer: which generation is current (+ retired ones)
    dst/_packs/<generation>/part-00000.parquet ...   the shards: a row per packed file
    dst/_packs/<generation>/.index.listing           the packed files' listing (air_core.manifest.Manifest)
    dst/_packs/<generation>/.offsets                 where each file's bytes start in its shard (int64, LE)
    dst/_packs/<generation>/.part-00000.offsets ...  the same, per shard, copied before the shard
    dst/_packs/<generation>/.pack.json               the generation's marker, written last

A pack of records that name media (`air_core.packs.records`) has a row per
record, its media's bytes in it, and no `.offsets`: its listing lists the
records files, and its marker names the media columns and their kinds
(`media`) and, for each row group, the records file its records come from.
A marker without `media` is a pack of loose files, as every earlier pack is.

The generation's own files are hidden (a leading `.`), so that a reader given
its folder (`load_dataset("parquet", data_dir=...)`, Spark, DuckDB) finds
exactly the shards.

A generation is named for what it packs (source, its fingerprint, sizes), so
a run that was killed finds its folder again and keeps the shards it
finished: a shard gets its name only once it is complete on the volume. The
generation's marker lists the shards, their row groups and the source's
fingerprint; the pointer names a generation only once its marker is there.
Readers resolve `dst` (or a generation folder) through `pack_folder`, and
read one generation to its end: a replaced generation is kept for
`GRACE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import VolumePathError
from ..io import transport, volume
from ..io.published import GRACE_SECONDS, read_json

POINTER = "_air_pack.json"
GENERATIONS = "_packs"
MARKER = ".pack.json"
INDEX = ".index.listing"
OFFSETS = ".offsets"
FORMAT = 1
POINTER_TMP = f".{POINTER}."


@dataclass(frozen=True)
class Shard:
    """One shard of a generation.

    Attributes:
        name: its file name in the generation folder.
        size: its size in bytes.
        row_groups: rows (packed files, or records) of each of its row groups, in order.
        row_group_bytes: bytes of each row group's files (records: their media's).
        row_group_records: a pack of records: the records file (a position in the pack's listing) whose records
            each row group holds; empty for a pack of files.
    """

    name: str
    size: int
    row_groups: tuple[int, ...]
    row_group_bytes: tuple[int, ...]
    row_group_records: tuple[int, ...] = ()


@dataclass(frozen=True)
class Generation:
    """A complete generation, as its marker describes it.

    Attributes:
        path: the generation folder's volume path.
        source: the volume folder that was packed.
        source_fingerprint: the fingerprint of the listing that was packed.
        files: files packed (a pack of records: records).
        labels: whether the shards have a `label` column (every file sat in a class folder).
        shards: the shards, in listing order.
        media: a pack of records that name media: its media columns (as the rows name them) and their kinds
            ("image", ...); empty for a pack of files.
    """

    path: str
    source: str
    source_fingerprint: str
    files: int
    labels: bool
    shards: tuple[Shard, ...]
    media: tuple[tuple[str, str], ...] = ()


def shard_name(k: int) -> str:
    """The file name of shard `k`."""
    return f"part-{k:05d}.parquet"


def offsets_name(k: int) -> str:
    """The file that holds shard `k`'s offsets until the generation's `OFFSETS` gathers them all."""
    return f".part-{k:05d}.offsets"


def pack_folder(path: str | volume.VolumePath) -> str | None:
    """The generation folder to read when `path` is a pack, else None.

    `path` may be a pack's destination (its pointer names the current
    generation) or a generation folder itself.

    Raises:
        VolumePathError: `path` holds a pointer that is unreadable or names a
            missing generation.
    """
    vp = volume.parse(path)
    with ThreadPoolExecutor(1, thread_name_prefix="air-probe") as pool:  # two round trips at once
        pointer_read = pool.submit(read_pointer, vp)
        if transport.is_file(os.path.join(vp.local, MARKER)):
            return vp.path
        pointer = pointer_read.result()
    if pointer is None:
        return None
    folder = f"{vp.path}/{pointer['generation']}"
    if not transport.is_file(os.path.join(vp.local, pointer["generation"], MARKER)):
        raise VolumePathError(f"{vp.path} is a pack whose current generation {folder} is missing (removed by "
                              "hand?): pack the source into it again")
    return folder


def read_pointer(vp: volume.VolumePath) -> dict | None:
    """The destination's pointer, checked; None when there is none."""
    pointer = read_json(os.path.join(vp.local, POINTER))
    if pointer is None:
        return None
    gen = pointer.get("generation") if isinstance(pointer, dict) else None
    if (not isinstance(pointer, dict) or pointer.get("format") != FORMAT or not isinstance(gen, str)
            or not gen.startswith(GENERATIONS + "/") or "/" in gen[len(GENERATIONS) + 1:]):
        raise VolumePathError(f"{vp.path}/{POINTER} is not a pointer written by air-data pack: remove it, "
                              "or choose another destination")
    return pointer


def load_generation(folder: str) -> Generation:
    """The generation in `folder` (a volume path), from its marker."""
    vp = volume.parse(folder)
    try:
        m = json.loads(transport.read_file(os.path.join(vp.local, MARKER)))
        records = "media" in m  # a pack of records: each row group names its records file too
        shards = tuple(Shard(s["name"], s["size"], tuple(g[0] for g in s["row_groups"]),
                             tuple(g[1] for g in s["row_groups"]),
                             tuple(g[2] for g in s["row_groups"]) if records else ())
                       for s in m["shards"])
        media = tuple((str(name), str(kind)) for name, kind in m.get("media", {}).items())
        return Generation(vp.path, m["source"], m["source_fingerprint"], m["files"], m["labels"], shards, media)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise VolumePathError(f"{vp.path}/{MARKER} is not a pack marker this version reads ({e}): "
                              "pack the source again") from None


def marker(source: str, fingerprint: str, files: int, labels: bool, shards: list[dict], options: dict,
           media: dict[str, str] | None = None) -> dict:
    """A generation's marker: what `load_generation` reads back. `media`: a pack of records, its media columns'
    kinds (each shard's row groups then `[rows, bytes, records file]`, not `[rows, bytes]`)."""
    out = {"format": FORMAT, "source": source, "source_fingerprint": fingerprint, "files": files,
           "labels": labels, "options": options, "shards": shards,
           "packed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if media is not None:
        out["media"] = media
    return out


def write_whole(local_path: str, data: bytes) -> None:
    """Write a small file on a volume front to back under a hidden name, then rename it into place (over the
    Files API: one `PUT`, which is whole or nothing)."""
    api = transport.remote(local_path)
    if api is not None:
        api.put(local_path, data)
        return
    folder, name = os.path.split(local_path)
    # Packers on other machines may write the same file at once (and have the same process id): a name of its own.
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(8)}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, local_path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def point_at(vp: volume.VolumePath, generation: str) -> None:
    """Make `generation` (a name under `_packs`) current: the commit point; then sweep old generations."""
    now = time.time()
    previous = read_pointer(vp)
    retired = {} if previous is None else {
        g: t for g, t in previous.get("retired", {}).items() if transport.is_dir(os.path.join(vp.local, g))}
    current = f"{GENERATIONS}/{generation}"
    if previous is not None and previous["generation"] != current:
        retired[previous["generation"]] = now
    retired.pop(current, None)
    pointer = {"format": FORMAT, "generation": current, "retired": retired}
    write_whole(os.path.join(vp.local, POINTER), json.dumps(pointer, indent=1).encode())
    _sweep(vp, current, retired, now)


def _sweep(vp: volume.VolumePath, current: str, retired: dict[str, float], now: float) -> None:
    """Remove generations retired `GRACE_SECONDS` ago, and leftovers of other runs untouched as long.

    Leftovers are whole generations a killed run began, and in the current
    one the hidden copies that a killed run left unfinished (`*.part`).
    """
    root = os.path.join(vp.local, GENERATIONS)
    if transport.remote(root) is not None:
        _sweep_remote(root, current, retired, now)
        return
    for entry in os.scandir(root):
        name = f"{GENERATIONS}/{entry.name}"
        if name == current:
            for part in os.scandir(entry.path):
                with contextlib.suppress(FileNotFoundError):  # another packer's copy, renamed meanwhile
                    if part.name.endswith(".part") and now - part.stat().st_mtime >= GRACE_SECONDS:
                        os.unlink(part.path)
            continue
        with contextlib.suppress(FileNotFoundError):  # another packer may sweep it too: gone is fine
            since = retired.get(name)
            if since is None:
                since = max([entry.stat().st_mtime] + [e.stat().st_mtime for e in os.scandir(entry.path)])
            if now - since >= GRACE_SECONDS:
                shutil.rmtree(entry.path, ignore_errors=True)


def _sweep_remote(root: str, current: str, retired: dict[str, float], now: float) -> None:
    """`_sweep` over the Files API, where a pack leaves no `.part` copies (its files are whole-object PUTs)."""
    for name in transport.entries(root)[1]:
        generation = f"{GENERATIONS}/{name}"
        if generation == current:
            continue
        since = retired.get(generation)
        if since is None:  # a leftover: as old as its newest file (an empty one, being begun, is left)
            with contextlib.suppress(FileNotFoundError):
                since = max((mtime / 1e9 for _, _, mtime in transport.entries(f"{root}/{name}")[0]), default=None)
        if since is not None and now - since >= GRACE_SECONDS:
            transport.remove_tree(f"{root}/{name}")


__all__ = ["GENERATIONS", "INDEX", "MARKER", "POINTER", "Generation", "Shard", "load_generation", "pack_folder",
           "point_at"]
