"""A sorted, fingerprinted listing of a volume folder: what every rank plans from.

FUSE listing is latency-bound (one round trip per folder), so folders are
listed concurrently. Names starting with `.` or `_` are skipped at every level
(`_delta_log`, `_SUCCESS`, `.ipynb_checkpoints`), as Spark and Ray do.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import json
import os
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Iterable, Sequence

from . import volume
from .errors import EmptyVolumeError

LIST_THREADS = 32


@dataclass(frozen=True)
class Manifest:
    """The files under `root`, sorted by relative path.

    Attributes:
        root: the listed folder as a volume path (`/Volumes/c/s/v/dir`).
        paths: paths relative to `root`, `/`-separated, sorted.
        sizes: sizes in bytes, aligned with `paths`.
        mtimes: modification times in nanoseconds, aligned with `paths`.
        fingerprint: a digest of the root and of (path, size, mtime) for every
            file; two listings with the same fingerprint plan identically.
    """

    root: str
    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    mtimes: tuple[int, ...]
    fingerprint: str

    def __len__(self) -> int:
        return len(self.paths)

    def volume_path(self, i: int) -> str:
        """The volume path of item `i`."""
        return f"{self.root}/{self.paths[i]}"

    @classmethod
    def build(cls, root: str, entries: Iterable[tuple[str, int, int]]) -> "Manifest":
        """Make a manifest from (relative path, size, mtime_ns) triples in any order."""
        rows = sorted(entries)
        digest = hashlib.sha256(f"{root}\n".encode())  # a copy elsewhere is another listing
        for rel, size, mtime in rows:
            digest.update(f"{rel}\0{size}\0{mtime}\n".encode())
        return cls(
            root=root,
            paths=tuple(r[0] for r in rows),
            sizes=tuple(r[1] for r in rows),
            mtimes=tuple(r[2] for r in rows),
            fingerprint=digest.hexdigest()[:32],
        )

    def save(self, file: str) -> None:
        """Write the manifest to `file` atomically (gzip'd JSON)."""
        tmp = f"{file}.{os.getpid()}.tmp"
        with gzip.open(tmp, "wt", compresslevel=1) as f:
            json.dump({"root": self.root, "paths": self.paths, "sizes": self.sizes,
                       "mtimes": self.mtimes, "fingerprint": self.fingerprint}, f)
        os.chmod(tmp, 0o600)
        os.replace(tmp, file)

    @classmethod
    def load(cls, file: str) -> "Manifest":
        """Read a manifest written by `save`."""
        with gzip.open(file, "rt") as f:
            d = json.load(f)
        return cls(d["root"], tuple(d["paths"]), tuple(d["sizes"]), tuple(d["mtimes"]), d["fingerprint"])


def _patterns(p: str | Sequence[str] | None) -> tuple[str, ...]:
    if p is None:
        return ()
    return (p,) if isinstance(p, str) else tuple(p)


def _selected(rel: str, include: tuple[str, ...], exclude: tuple[str, ...], suffixes: tuple[str, ...]) -> bool:
    if suffixes and not rel.lower().endswith(suffixes):
        return False
    if include and not any(fnmatch.fnmatchcase(rel, g) for g in include):
        return False
    return not any(fnmatch.fnmatchcase(rel, g) for g in exclude)


def _scan(vp: volume.VolumePath, local_dir: str, rel_dir: str):
    """List one folder: (files as (rel, size, mtime), sub-folders as (local, rel, real))."""
    files, dirs = [], []
    with os.scandir(local_dir) as it:
        for e in it:
            if e.name[0] in "._":
                continue
            rel = f"{rel_dir}{e.name}"
            if e.is_symlink():
                real = volume.check_inside(vp, e.path)
                st = os.stat(real)
                if os.path.isdir(real):
                    dirs.append((e.path, rel + "/", real))
                else:
                    files.append((rel, st.st_size, st.st_mtime_ns))
            elif e.is_dir():
                dirs.append((e.path, rel + "/", e.path))
            else:
                st = e.stat()
                files.append((rel, st.st_size, st.st_mtime_ns))
    return files, dirs


def list_folder(
    path: str,
    *,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    extensions: Sequence[str] | None = None,
) -> Manifest:
    """List every file under a volume folder, recursively and concurrently.

    Args:
        path: a volume path (`/Volumes/c/s/v/dir` or `dbfs:/Volumes/...`).
        include: glob(s) matched against the path relative to `path`
            (`*` crosses `/`); when given, only matching files are kept.
        exclude: glob(s) of files to leave out.
        extensions: keep only files with these extensions (case-insensitive, without the dot).

    Raises:
        VolumePathError: the path is malformed, missing, a file, or a symlink
            under it leads outside the volume.
        EmptyVolumeError: no file matched.
    """
    vp = volume.parse(path)
    volume.require_dir(vp)
    inc, exc = _patterns(include), _patterns(exclude)
    suffixes = tuple("." + e.lower().lstrip(".") for e in extensions or ())
    entries: list[tuple[str, int, int]] = []
    seen = {os.path.realpath(vp.local)}
    with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="air-list") as pool:
        pending = {pool.submit(_scan, vp, vp.local, "")}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                files, dirs = fut.result()
                entries.extend(f for f in files if _selected(f[0], inc, exc, suffixes))
                for local, rel, real in dirs:
                    real = os.path.realpath(real)
                    if real not in seen:  # a symlinked folder must not loop
                        seen.add(real)
                        pending.add(pool.submit(_scan, vp, local, rel))
    if not entries:
        what = f" matching include={list(inc)} exclude={list(exc)}" if inc or exc else ""
        what += f" with file_extensions={list(extensions)}" if extensions else ""
        raise EmptyVolumeError(
            f"{vp.path} holds no file{what} (names starting with '.' or '_' are skipped); "
            "check the path and the patterns"
        )
    return Manifest.build(vp.path, entries)
