"""Listing a volume folder: every file under it with its size and mtime, as a `Manifest`.

FUSE listing is latency-bound (one round trip per folder), so folders are
listed by many threads at once. Each file then costs a `stat` and a few
Python objects, about 3 us of CPU under one interpreter lock: a tree of 10^6
files would keep one core busy for seconds whatever the threads (and many
threads contending for the lock cost more than they hide). So a listing still
running after `HAND_OFF_SECONDS` hands the folders it has not opened yet to
worker processes, up to one per core, each listing whole subtrees with threads
of its own; small folders never start one. The workers are fresh interpreters,
not forks: nothing of the caller's state (threads, locks, its `__main__`) is
copied or run again.

Over the Files API (`air_core.io.transport`) a folder is its listing's pages,
and the threads alone list: each folder costs a request, not the lister's CPU.

Names starting with `.` or `_` are skipped at every level (`_delta_log`,
`_SUCCESS`, `.ipynb_checkpoints`), as Spark and Ray do. A symlink must stay
inside the volume; a symlinked folder is listed once however many links lead to
it (within one process: a link into a subtree that another worker lists is
listed under both names).

Only what is kept costs a `stat`: a file the selection leaves out is known by
its name alone, and a folder an exclude glob covers whole (`images/*`) is
never opened. `list_records` lists a tree of records beside the media they
name (Hugging Face's folder layout) with a `stat` of only a few media: in a
folder that holds a metadata file, and in every folder under it, the files of
a records format are listed, and of the others only the first of each
extension, to stand for the rest.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import pickle
import subprocess
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Sequence

import numpy as np
from tqdm import tqdm

from . import transport, volume
from ..errors import AirError, EmptyVolumeError, FetchError
from ..manifest import Manifest

LIST_THREADS = 32
PROGRESS_AFTER_SECONDS = 2.0
HAND_OFF_SECONDS = 0.25
MAX_PROCESSES = 8
# The collector off: a worker makes a tuple per file and no cycle, and its passes over 10^6 of them cost the
# listing ~0.4 s (measured, 10^6 files over 2 workers).
_WORKER = "import gc; gc.disable(); from air_core.io.listing import _worker; _worker()"

# (local path, path relative to the listed folder with a trailing "/", real path, whether it lies in or under a folder
# that holds a metadata file of `list_records`)
Folder = tuple[str, str, str, bool]
# (include globs, exclude globs, endings a kept file has, metadata files' names, endings of records files)
Selection = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]
Part = tuple[list[str], np.ndarray, np.ndarray]  # a part of a listing: (paths, sizes, mtimes)


def list_folder(
    path: str | volume.VolumePath,
    *,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    extensions: Sequence[str] | None = None,
) -> Manifest:
    """List every file under a volume folder, recursively and concurrently.

    Args:
        path: a volume path (`/Volumes/c/s/v/dir` or `dbfs:/Volumes/...`), or one parsed (`VolumePath`).
        include: glob(s) matched against the path relative to `path`
            (`*` crosses `/`); when given, only matching files are kept.
        exclude: glob(s) of files to leave out.
        extensions: keep only files with these extensions (case-insensitive, without the dot).

    Raises:
        VolumePathError: the path is malformed, missing, a file, or a symlink
            under it leads outside the volume.
        EmptyVolumeError: no file matched.
    """
    return _listed(path, (_patterns(include), _patterns(exclude), _suffixes(extensions), (), ()))


def list_records(
    path: str | volume.VolumePath,
    *,
    metadata: Sequence[str],
    records: Sequence[str],
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    extensions: Sequence[str] | None = None,
) -> Manifest:
    """List a volume folder as `list_folder` does, but not the media beside a metadata file.

    In a folder that holds a file named one of `metadata` (case-insensitive),
    and in every folder under it, the files whose names end with none of
    `records` are listed only as the first of each extension (by name), which
    stands for the others: they cost no `stat`. A tree of records beside 10^7
    images in 10^4 folders is then read as its folders' names, its records
    files and 10^4 images.

    Raises:
        VolumePathError, EmptyVolumeError: as `list_folder`.
    """
    return _listed(path, (_patterns(include), _patterns(exclude), _suffixes(extensions),
                          tuple(n.lower() for n in metadata), tuple(r.lower() for r in records)))


def _listed(path: str | volume.VolumePath, selection: Selection) -> Manifest:
    vp = volume.parse(path)
    api = transport.remote(vp.local)
    if api is None:
        volume.require_dir(vp)
    top = vp.local if api is not None else os.path.realpath(vp.local)
    walk = _Walk(vp, selection, {top})
    # Over the Files API a folder costs a request, not the lister's CPU: threads alone keep up.
    processes = 1 if api is not None else min(_cores(), MAX_PROCESSES)
    with tqdm(desc=f"listing {vp.path}", unit=" files", delay=PROGRESS_AFTER_SECONDS, leave=False) as bar:
        try:
            left = walk.run([(vp.local, "", top, False)], LIST_THREADS, bar,
                            until=time.monotonic() + HAND_OFF_SECONDS if processes > 1 else None)
        except (FileNotFoundError, FetchError):
            if api is not None:  # over the Files API a folder is found by listing it, a round trip saved
                volume.require_dir(vp)  # what is there instead, in words
            raise
        handed = _in_processes(walk, left, processes, bar) if left else []
        if handed is None:  # no process can be started here: the rest in this one
            walk.run(left, LIST_THREADS, bar)
            handed = []
    parts = [walk.columns(), *handed]
    if not any(len(sizes) for _, sizes, _ in parts):
        inc, exc, suffixes = selection[:3]
        what = f" matching include={list(inc)} exclude={list(exc)}" if inc or exc else ""
        what += f" with file_extensions={[e.lstrip('.') for e in suffixes]}" if suffixes else ""
        raise EmptyVolumeError(
            f"{vp.path} holds no file{what} (names starting with '.' or '_' are skipped); "
            "check the path and the patterns"
        )
    return Manifest.from_columns(vp.path, [p for paths, _, _ in parts for p in paths],
                                 np.concatenate([sizes for _, sizes, _ in parts]),
                                 np.concatenate([mtimes for _, _, mtimes in parts]))


class _Walk:
    """The files found so far under one folder, and the real folders listed (so that links do not loop)."""

    def __init__(self, vp: volume.VolumePath, selection: Selection, seen: set[str]) -> None:
        self.vp, self.selection, self.seen = vp, selection, seen
        self.files: list[tuple[str, int, int]] = []

    def columns(self) -> Part:
        """The files found, sorted by path, as (paths, sizes, mtimes): a part of a listing, to join others."""
        self.files.sort()
        paths, sizes, mtimes = zip(*self.files) if self.files else ((), (), ())
        return list(paths), np.array(sizes, np.int64), np.array(mtimes, np.int64)

    def run(self, folders: list[Folder], threads: int, bar: tqdm | None, until: float | None = None) -> list[Folder]:
        """List `folders` and every folder under them; past `until`, return the ones not opened yet instead."""
        waiting, pending, handing_off = list(folders), set[Future](), False
        with ThreadPoolExecutor(threads, thread_name_prefix="air-list") as pool:
            while pending or waiting:
                # No more in flight than threads: the folders not opened yet stay here, to hand off.
                if not handing_off:
                    while waiting and len(pending) < threads:
                        pending.add(pool.submit(_scan, self.vp, self.selection, *waiting.pop()))
                if not pending:
                    break
                timeout = None if until is None or handing_off else max(0.0, until - time.monotonic())
                done, pending = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
                for fut in done:
                    files, dirs = fut.result()
                    if bar is not None:
                        bar.update(len(files))
                    self.files += files
                    for folder in dirs:
                        if folder[2] not in self.seen:  # a symlinked folder must not loop
                            self.seen.add(folder[2])
                            waiting.append(folder)
                # Past `until`, what was started finishes, and the rest is handed off.
                handing_off = until is not None and time.monotonic() >= until
        return waiting


def _in_processes(walk: _Walk, folders: list[Folder], processes: int, bar: tqdm) -> list[Part] | None:
    """The files under `folders`, listed by worker processes, a share of the folders each: (paths, sizes, mtimes).

    None if no worker could be started (a sandbox without `fork`, a missing interpreter).
    """
    processes = min(processes, len(folders))
    job = {"volume": walk.vp.path, "selection": walk.selection, "seen": walk.seen,
           "threads": max(4, LIST_THREADS // processes)}
    # This package's folder first on the path: the caller may have found it by a path of its own.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    logs = [tempfile.TemporaryFile() for _ in range(processes)]  # a file, not a pipe: a chatty worker never blocks
    workers: list[subprocess.Popen] = []
    parts = []
    try:
        try:
            for log in logs:
                workers.append(subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE, stderr=log, env=env))
        except OSError:
            return None
        for k, w in enumerate(workers):
            # Round robin: neighbouring folders (often alike) go to different workers.
            with contextlib.suppress(BrokenPipeError), w.stdin:  # one that died says why below
                w.stdin.write(pickle.dumps({**job, "folders": folders[k::processes]}))
        for w, log in zip(workers, logs):
            out = w.stdout.read()
            if w.wait() != 0 or not out:
                log.seek(0)
                raise AirError(f"listing {walk.vp.path} in a worker process failed (exit code {w.returncode}): "
                               f"{log.read().decode(errors='replace').strip()[-2000:]}")
            found = pickle.loads(out)
            if isinstance(found, BaseException):
                raise found
            paths, sizes, mtimes = found
            parts.append((paths.split("\0") if paths else [], np.frombuffer(sizes, np.int64),
                          np.frombuffer(mtimes, np.int64)))
            bar.update(len(parts[-1][1]))
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
            w.stdout.close()
        for log in logs:
            log.close()
    return parts


def _worker() -> None:
    """A worker process: list the folders of the job on stdin, write the files found (or the error) to stdout.

    The files go sorted by path, so the caller's sort of every part joined meets long sorted runs.
    """
    job = pickle.load(sys.stdin.buffer)
    try:
        walk = _Walk(volume.parse(job["volume"]), job["selection"], job["seen"])
        walk.run(job["folders"], job["threads"], None)
        paths, sizes, mtimes = walk.columns()
        found: object = ("\0".join(paths), sizes.tobytes(), mtimes.tobytes())
    except Exception as e:  # raised again by the caller, as if listed there
        found = e
    sys.stdout.buffer.write(pickle.dumps(found))


def _cores() -> int:
    """The cores this process may run on (a container's share, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _patterns(p: str | Sequence[str] | None) -> tuple[str, ...]:
    if p is None:
        return ()
    return (p,) if isinstance(p, str) else tuple(p)


def _suffixes(extensions: Sequence[str] | None) -> tuple[str, ...]:
    return tuple("." + e.lower().lstrip(".") for e in extensions or ())


def _selected(rel: str, include: tuple[str, ...], exclude: tuple[str, ...], suffixes: tuple[str, ...]) -> bool:
    if suffixes and not rel.lower().endswith(suffixes):
        return False
    if include and not any(fnmatch.fnmatchcase(rel, g) for g in include):
        return False
    return not any(fnmatch.fnmatchcase(rel, g) for g in exclude)


def _covered(rel_dir: str, exclude: tuple[str, ...]) -> bool:
    """Whether an exclude glob leaves out every file under the folder `rel_dir` (with its trailing "/"): one that
    ends with `*` whose rest matches the folder itself (`images/*`, `*/cache*`)."""
    return any(g.endswith("*") and fnmatch.fnmatchcase(rel_dir, g[:-1]) for g in exclude)


def _scan(vp: volume.VolumePath, selection: Selection, local_dir: str, rel_dir: str, real_dir: str, beside: bool):
    """List one folder (whose real path is `real_dir`): the files `selection` keeps as (rel, size, mtime), and the
    sub-folders to list as `Folder`s. Only the files kept cost a `stat`; `beside`: the folder lies under one that
    holds a metadata file (see `list_records`)."""
    inc, exc, suffixes, metadata, records = selection
    api = transport.remote(local_dir)
    if api is not None:
        found, folders = api.list(local_dir)
        names = [(name, (size, mtime)) for name, size, mtime in found if name[0] not in "._"]
        dirs = [(f"{local_dir}/{n}", f"{rel_dir}{n}/", f"{local_dir}/{n}") for n in folders if n[0] not in "._"]
    else:
        names, dirs = [], []
        with os.scandir(local_dir) as it:
            for e in it:
                if e.name[0] in "._":
                    continue
                rel = f"{rel_dir}{e.name}"
                if e.is_symlink():  # every link is checked, kept or not: none may lead out of the volume
                    real = volume.check_inside(vp, e.path)
                    if os.path.isdir(real):
                        dirs.append((e.path, rel + "/", real))
                    else:
                        names.append((e.name, real))
                elif e.is_dir():
                    dirs.append((e.path, rel + "/", f"{real_dir}/{e.name}"))  # no link on the way: no syscall
                else:
                    names.append((e.name, e))
    if inc or exc or suffixes:
        names = [(name, entry) for name, entry in names if _selected(f"{rel_dir}{name}", inc, exc, suffixes)]
    beside = beside or any(name.lower() in metadata for name, _ in names)
    if beside:
        names = _standing_for_media(names, records)
    files = []
    for name, entry in names:
        try:
            files.append((f"{rel_dir}{name}", *_version(entry)))
        except FileNotFoundError:  # removed since the folder was read: not listed, as if read after
            continue
    return files, [(*d, beside) for d in dirs if not _covered(d[1], exc)]


def _standing_for_media(names: list[tuple[str, object]], records: tuple[str, ...]) -> list[tuple[str, object]]:
    """Of a folder's `names` beside a metadata file, those to list: every one of a records format (ending with one
    of `records`), and of the others the first of each extension by name."""
    out, extensions = [], set()
    for name, entry in sorted(names, key=lambda n: n[0]):
        lowered = name.lower()
        if not lowered.endswith(records):
            ext = os.path.splitext(lowered)[1]
            if ext in extensions:
                continue
            extensions.add(ext)
        out.append((name, entry))
    return out


def _version(entry: tuple[int, int] | str | os.DirEntry) -> tuple[int, int]:
    """A file's (size, mtime): as its folder's listing gave them (the Files API), or from a `stat` of its real
    path (a link) or of its folder entry."""
    if isinstance(entry, tuple):
        return entry
    st = os.stat(entry) if isinstance(entry, str) else entry.stat()
    return st.st_size, st.st_mtime_ns


__all__ = ["list_folder", "list_records"]
