"""Publishing exports on a volume with only what object storage offers; pure file I/O (no pyarrow).

A volume is object storage behind FUSE: files can be created and written
front to back, renamed and deleted, folders made and listed, but there are
no symbolic links, no locks, no folder renames and no appends. So an export
is never moved into place: each one is written into a folder of its own,
and a small pointer file, written whole under a temporary name and then
renamed over the previous pointer, names the current one:

    dest/_air_export.json                      the pointer: which export is current (+ table, version, files, rows)
    dest/_exports/v7-20250612T101500Z-3f9a1c2b0d4e/part-3f9a1c2b0d4e-0.parquet   the current export
    dest/_exports/v6-20250611T091200Z-91b0c2d3e4f5/...                            a previous one, kept an hour

Every name in `dest` starts with `_` or `.`, so a plain listing of `dest`
finds nothing, rather than several exports mixed: readers resolve `dest`
with `current_export`, which returns the current export's own folder. That
folder holds only the export's Parquet files, and stays in place for at
least `GRACE_SECONDS` after a newer export replaces it, so a reader that
resolved it reads one consistent version to the end.

Promises:

- Readers never see a half-written export: the pointer names a folder only
  once all of its files are written; a process killed at any point leaves
  the previous pointer, and so the previous export, served.
- Exporting what the pointer already names (same table, version and sizes)
  reads the pointer and writes nothing.
- Exporters of one destination on one node take turns under a lock on the
  node's local disk (a per-user folder under the temp dir), so the second
  finds the export done. Exporters on different nodes each write their own
  uniquely named folder; the last pointer renamed wins, and each pointer
  names one complete export.
- Exports replaced more than `GRACE_SECONDS` ago, and leftovers of killed or
  losing exporters untouched for that long, are removed by a later export.

Over the Files API (`air_core.io.transport`), where nothing is renamed,
the same layout is written with whole-object `PUT`s: each part is written
on local disk and put as soon as the engine finishes it, then the pointer
is put last (a `PUT` is whole or nothing, so it needs no temporary name).
Listing, stat and delete for reuse and the sweep go through the transport.

A reader that does not use this library (`load_dataset("parquet",
data_dir=...)`, `spark.read.parquet`) is given the current export's folder:
`ExportResult.path`, `current_export(dest)`, or `dest` joined with the
pointer's `"folder"` (`"_exports/<name>"`). Its `"files"` lists the Parquet
files in that folder.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import posixpath
import re
import secrets
import shutil
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable

from ..errors import VolumePathError
from ..io import transport, volume
from ..io.node_lock import node_lock
from ..io.published import GRACE_SECONDS, clock, read_json

POINTER = "_air_export.json"
EXPORTS = "_exports"
_FORMAT = 2
_POINTER_TMP = f".{POINTER}."
_STAMP = "%Y%m%dT%H%M%SZ"
_UPLOADS = 4  # parts uploading at once over the Files API
_STAGED = 2 * _UPLOADS  # parts on local disk, uploading or waiting to, before the engine waits for room
_NAME = re.compile(r"(?:v\d+|snapshot)-(\d{8}T\d{6}Z)-[0-9a-f]+")


@dataclass(frozen=True)
class ExportResult:
    """What an export holds.

    Attributes:
        dest: the destination's volume path (see `current_export`).
        path: the volume path of this export's own folder, which holds
            exactly its Parquet files; give it to readers that list a folder.
        table: the table as identified (a volume path, a URI or a table name).
        version: the table version exported (None when Spark cannot tell it).
        files: the Parquet files, relative to `path`, sorted.
        rows: rows in all files.
        skipped: True when `dest` already held this export and nothing was written.
    """

    dest: str
    path: str
    table: str
    version: int | None
    files: tuple[str, ...]
    rows: int
    skipped: bool


class Parts:
    """What an engine tells an export of the Parquet files it writes, and asks it; on a mounted volume,
    where the files are written in place, there is nothing to do."""

    def finished(self, path: str) -> None:
        """The file at `path` is complete."""

    def wanted(self) -> bool:
        """Whether to write more rows: False once the export has failed."""
        return True


@dataclass(frozen=True)
class Snapshot:
    """A table version ready to export, as an engine prepares it.

    Attributes:
        key: what identifies the export (table, version, sizes); an export
            whose key equals the current one's is skipped. JSON-serialisable.
        write: writes the rows as Parquet into a local folder it creates
            (`write(folder, token, parts)`, `token` unique to this export,
            for file names), tells `parts` (a `Parts`) of each file as soon
            as it is complete and asks it before each batch of rows whether
            to go on, and returns the number of rows written.
        root: the table's local folder, if it has one: the destination must
            not lie inside it.
    """

    key: dict
    write: Callable[[str, str, Parts], int]
    root: str | None = None


def current_export(path: str | volume.VolumePath) -> str | None:
    """The folder of the current export, when `path` is a destination of `export_delta`.

    Args:
        path: a volume path, `/Volumes/...` or `dbfs:/Volumes/...`.

    Returns:
        When `path` holds an export pointer: the volume path of the folder
        holding the current complete export, whose recursive listing
        (skipping names starting with `.` or `_`) is exactly that export's
        Parquet files. None for any other path (a plain folder, a file, a
        path that does not exist, a destination whose first export is not
        done yet).

    Raises:
        VolumePathError: the path is not a volume path; or it is a
            destination whose pointer names a missing export; or one left by
            an earlier version of export_delta.
    """
    vp = volume.parse(path)
    pointer = _read_pointer(vp)
    if pointer is None:
        return None
    folder = f"{vp.path}/{pointer['folder']}"
    if not transport.is_dir(f"{vp.local}/{pointer['folder']}"):
        raise VolumePathError(f"{vp.path} is an export destination whose current export {folder} is missing "
                              "(removed by hand?): export the table to it again")
    return folder


class Destination:
    """A volume folder that exports are published under (see the module docstring)."""

    def __init__(self, dest: str) -> None:
        """Validate the destination's path; raises `VolumePathError`."""
        vp = volume.parse(dest)
        if vp.path == vp.volume:
            raise VolumePathError(f"{vp.path} is a volume's root: export into a folder inside it, "
                                  f"e.g. {vp.volume}/exports/<name>")
        if posixpath.basename(vp.path)[0] in "._":
            raise VolumePathError(f"{vp.path}: a destination starting with '.' or '_' is skipped by listings; "
                                  "choose a name that readers will see")
        self.vp = vp

    def publish(self, snapshot: Snapshot) -> ExportResult:
        """Write `snapshot` into a fresh export folder and point the destination at it, unless it is current.

        Raises:
            VolumePathError: the destination lies inside the table, holds
                something other than exports, or cannot be written.
        """
        self._check_outside(snapshot.root)
        current = self._current()
        if self._holds(current, snapshot.key):
            return self._result(current, skipped=True)
        if not transport.is_dir(self.vp.local_volume):
            raise VolumePathError(f"the volume {self.vp.volume} does not exist: create it, or check the "
                                  f"catalog, schema and volume names in {self.vp.path}")
        with node_lock(self.vp.local):
            current = self._current()  # another process of this node may have exported while this one waited
            if self._holds(current, snapshot.key):
                return self._result(current, skipped=True)
            exports = os.path.join(self.vp.local, EXPORTS)
            try:
                transport.make_dirs(exports)
                volume.check_inside(self.vp, exports)
            except OSError as e:
                raise VolumePathError(f"cannot write an export into {self.vp.path}: {e.strerror or e}; "
                                      "choose a destination you can write to") from None
            token = secrets.token_hex(6)
            version, started = snapshot.key.get("version"), time.gmtime()
            name = f"{'snapshot' if version is None else f'v{version}'}-{time.strftime(_STAMP, started)}-{token}"
            folder = os.path.join(exports, name)
            try:
                if transport.remote(folder) is None:
                    rows = snapshot.write(folder, token, Parts())
                    files = sorted(n for n in os.listdir(folder) if _is_part(n))
                else:
                    rows, files = _write_staged(snapshot, folder, token)
            except BaseException:
                transport.remove_tree(folder)
                raise
            pointer = {"format": _FORMAT, "folder": f"{EXPORTS}/{name}", "key": snapshot.key, "files": files,
                       "rows": rows, "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", started)}
            self._point_at(pointer, token)
            return self._result(pointer, skipped=False)

    def _check_outside(self, table_root: str | None) -> None:
        """Refuse a destination inside the table: the export would be written into the table's folder."""
        if table_root is None:
            return
        root = os.path.realpath(table_root).rstrip("/")
        here = os.path.join(os.path.realpath(os.path.dirname(self.vp.local)), os.path.basename(self.vp.local))
        if here == root or here.startswith(root + "/"):
            raise VolumePathError(f"{self.vp.path} is inside the table {table_root}: exporting there would "
                                  "write into the table's own folder; choose a destination outside it")

    def _current(self) -> dict | None:
        """The pointer, or None when no export is published yet; refuses a folder holding anything else."""
        pointer = _read_pointer(self.vp)
        local = self.vp.local
        if pointer is not None:
            return pointer
        there = (os.path.lexists(local) if transport.remote(local) is None
                 else transport.is_dir(local) or transport.is_file(local))
        if not there:
            return None
        if not transport.is_dir(local) or any(n not in (EXPORTS, POINTER) and not n.startswith(_POINTER_TMP)
                                              for n in transport.listdir(local)):
            raise VolumePathError(f"{self.vp.path} already exists and is not an export made by export_delta; "
                                  "remove it or choose another destination")
        return _read_pointer(self.vp)  # one another exporter published since the read above, or None

    def _holds(self, pointer: dict | None, key: dict) -> bool:
        return (pointer is not None and pointer["key"] == key
                and transport.is_dir(os.path.join(self.vp.local, pointer["folder"])))

    def _result(self, pointer: dict, skipped: bool) -> ExportResult:
        key = pointer["key"]
        return ExportResult(dest=self.vp.path, path=f"{self.vp.path}/{pointer['folder']}", table=key["table"],
                            version=key["version"], files=tuple(pointer["files"]), rows=pointer["rows"],
                            skipped=skipped)

    def _point_at(self, pointer: dict, token: str) -> None:
        """Make `pointer` current (the commit point), then remove what has been retired long enough."""
        now = clock()
        # Read again just before replacing it: an exporter on another node may have published meanwhile,
        # and the export it names must be kept for readers now on it.
        previous = _read_pointer(self.vp)
        retired = {} if previous is None else {
            f: t for f, t in previous.get("retired", {}).items()
            if transport.is_dir(os.path.join(self.vp.local, f))}
        if previous is not None:
            retired[previous["folder"]] = now
        pointer["retired"] = retired
        data = json.dumps(pointer, indent=1).encode()
        target = os.path.join(self.vp.local, POINTER)
        api = transport.remote(target)
        if api is not None:
            api.put(target, data)  # a PUT is whole or nothing: no hidden name to rename
        else:
            tmp = os.path.join(self.vp.local, _POINTER_TMP + token)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        self._sweep(pointer, now)

    def _sweep(self, pointer: dict, now: float) -> None:
        """Remove exports retired `GRACE_SECONDS` ago, and leftovers (of killed or losing exporters) as old."""
        exports = os.path.join(self.vp.local, EXPORTS)
        retired = {posixpath.basename(f): t for f, t in pointer["retired"].items()}
        current = posixpath.basename(pointer["folder"])
        files, folders = transport.entries(exports)
        # Exporters on other nodes may sweep the same entry at the same time: gone is fine.
        for name in folders:
            if name == current:
                continue
            since = retired.get(name)
            if since is None:
                since = _last_touched(f"{exports}/{name}")
            if now - since >= GRACE_SECONDS:
                transport.remove_tree(f"{exports}/{name}")
        for name, _, mtime_ns in files:  # no export writes a file here: a stray one
            if now - mtime_ns / 1e9 >= GRACE_SECONDS:
                with contextlib.suppress(FileNotFoundError):
                    transport.remove(f"{exports}/{name}")
        for name, _, mtime_ns in transport.entries(self.vp.local)[0]:
            if name.startswith(_POINTER_TMP) and now - mtime_ns / 1e9 >= GRACE_SECONDS:
                with contextlib.suppress(FileNotFoundError):  # renamed into place by another exporter meanwhile
                    transport.remove(f"{self.vp.local}/{name}")


def _read_pointer(vp: volume.VolumePath) -> dict | None:
    """The destination's pointer, checked; None when there is none."""
    pointer = read_json(os.path.join(vp.local, POINTER))
    if pointer is None:
        return None
    if isinstance(pointer, dict) and pointer.get("format") == 1:
        raise VolumePathError(
            f"{vp.path} holds an export made by an earlier version of export_delta (a link to a hidden folder "
            f"beside it): remove {vp.path} and {posixpath.dirname(vp.path)}/.{posixpath.basename(vp.path)}.exports, "
            "then export again")
    folder = pointer.get("folder") if isinstance(pointer, dict) else None
    if (not isinstance(pointer, dict) or pointer.get("format") != _FORMAT or not isinstance(folder, str)
            or not folder.startswith(EXPORTS + "/") or not _NAME.fullmatch(folder[len(EXPORTS) + 1:])):
        raise VolumePathError(f"{vp.path}/{POINTER} is not a pointer written by export_delta: remove it, "
                              "or choose another destination")
    return pointer


def _last_touched(folder: str) -> float:
    """When a folder in `_exports` was last written: its name's creation time, or its newest file's mtime."""
    m = _NAME.fullmatch(posixpath.basename(folder))
    newest = calendar.timegm(time.strptime(m.group(1), _STAMP)) if m else 0.0
    try:
        files, folders = transport.entries(folder)
    except FileNotFoundError:  # changing under this listing (a committer's renames, another sweep): not idle
        return clock()
    return max([newest] + [mtime_ns / 1e9 for _, _, mtime_ns in files]
               + [_last_touched(f"{folder}/{name}") for name in folders])


def _is_part(name: str) -> bool:
    """Whether a file an engine wrote is one of the export's Parquet files (not a marker or checksum)."""
    return name.endswith(".parquet") and name[0] not in "._"


def _write_staged(snapshot: Snapshot, folder: str, token: str) -> tuple[int, list[str]]:
    """Write `snapshot` over the Files API: each part on local disk first, then one whole-object `PUT`
    into the volume folder `folder` as soon as the engine finishes it; (rows, the parts' names).

    The staging folder is private (`mkdtemp`, 0700) and removed afterwards, on failure too; a part's
    local copy goes once it is on the volume. See `_Uploads` for how much the disk holds.
    """
    stage = tempfile.mkdtemp(prefix="air-export-")
    try:
        with ThreadPoolExecutor(_UPLOADS, thread_name_prefix="air-export-put") as pool:
            uploads = _Uploads(pool, folder)
            try:
                rows = snapshot.write(os.path.join(stage, "parts"), token, uploads)
            except BaseException:
                uploads.cancel()
                raise
            return rows, uploads.result()
    finally:
        shutil.rmtree(stage, ignore_errors=True)


class _Uploads(Parts):
    """The engine's parts, each put into the volume folder `folder` once finished, `_UPLOADS` at once.

    The engine waits for rows (`wanted`) while `_STAGED` parts are on local disk, so the disk holds
    those and what the engine has in hand; the first upload that fails stops it, rather than after
    the whole table is written.
    """

    def __init__(self, pool: ThreadPoolExecutor, folder: str) -> None:
        self._pool, self._folder = pool, folder
        self._all: list[Future] = []
        self._names: list[str] = []
        self._running: list[Future] = []
        self._failed = False

    def finished(self, path: str) -> None:
        name = os.path.basename(path)
        if _is_part(name) and not self._failed:
            self._names.append(name)
            self._all.append(self._pool.submit(self._put, path, name))
            self._running.append(self._all[-1])

    def wanted(self) -> bool:
        while True:
            running = []
            for u in self._running:
                if not u.done():
                    running.append(u)
                elif u.exception() is not None:
                    self._failed = True
            self._running = running
            if self._failed or len(running) <= _STAGED:
                return not self._failed
            wait(running, return_when=FIRST_COMPLETED)

    def cancel(self) -> None:
        for u in self._all:
            u.cancel()

    def result(self) -> list[str]:
        """The parts' names, once every upload is done; the first upload's error, if one failed."""
        for u in self._all:
            u.result()
        return sorted(self._names)

    def _put(self, path: str, name: str) -> None:
        transport.write_file(f"{self._folder}/{name}", path)
        os.unlink(path)


__all__ = ["EXPORTS", "GRACE_SECONDS", "POINTER", "Destination", "ExportResult", "Snapshot", "current_export"]
