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
from .errors import EmptyVolumeError, ManifestMismatchError, VolumePathError

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


def _selected(rel: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> bool:
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
) -> Manifest:
    """List every file under a volume folder, recursively and concurrently.

    Args:
        path: a volume path (`/Volumes/c/s/v/dir` or `dbfs:/Volumes/...`).
        include: glob(s) matched against the path relative to `path`
            (`*` crosses `/`); when given, only matching files are kept.
        exclude: glob(s) of files to leave out.

    Raises:
        VolumePathError: the path is malformed, missing, a file, or a symlink
            under it leads outside the volume.
        EmptyVolumeError: no file matched.
    """
    vp = volume.parse(path)
    volume.require_dir(vp)
    inc, exc = _patterns(include), _patterns(exclude)
    entries: list[tuple[str, int, int]] = []
    seen = {os.path.realpath(vp.local)}
    with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="air-list") as pool:
        pending = {pool.submit(_scan, vp, vp.local, "")}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                files, dirs = fut.result()
                entries.extend(f for f in files if _selected(f[0], inc, exc))
                for local, rel, real in dirs:
                    real = os.path.realpath(real)
                    if real not in seen:  # a symlinked folder must not loop
                        seen.add(real)
                        pending.add(pool.submit(_scan, vp, local, rel))
    if not entries:
        what = f" matching include={list(inc)} exclude={list(exc)}" if inc or exc else ""
        raise EmptyVolumeError(
            f"{vp.path} holds no file{what} (names starting with '.' or '_' are skipped); "
            "check the path and the patterns"
        )
    return Manifest.build(vp.path, entries)


def shared_manifest(
    path: str,
    *,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
) -> Manifest:
    """List once per job: rank 0 lists and broadcasts when torch.distributed is up.

    Without a process group every rank lists for itself and `check_same`
    compares the fingerprints through torchrun's rendezvous store.
    """
    dist = _dist()
    if dist is None or dist.get_world_size() == 1:
        m = list_folder(path, include=include, exclude=exclude)
        check_same(m)
        return m
    box: list = [None]
    if dist.get_rank() == 0:
        try:
            box[0] = list_folder(path, include=include, exclude=exclude)
        except Exception as e:  # every rank must raise, not hang on the broadcast
            box[0] = e
    dist.broadcast_object_list(box, src=0)
    if isinstance(box[0], Exception):
        raise box[0]
    return box[0]


_checks: dict[str, int] = {}


def check_same(manifest: Manifest) -> None:
    """Raise `ManifestMismatchError` unless every rank holds the same fingerprint.

    Uses the process group when there is one, else torchrun's agent store
    (`TORCHELASTIC_USE_AGENT_STORE`); a single process has nothing to compare.
    """
    dist = _dist()
    if dist is not None and dist.get_world_size() > 1:
        prints: list = [None] * dist.get_world_size()
        dist.all_gather_object(prints, manifest.fingerprint)
    elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        prints = _exchange_through_store(manifest)
    else:
        return
    if len(set(prints)) > 1:
        raise ManifestMismatchError(
            f"ranks listed different files under {manifest.root} (fingerprints by rank: {prints}): the folder "
            "changed while the job started, or ranks were given different options; retry once writes are "
            "done, or pass the same `manifest=` to every rank"
        )


def _exchange_through_store(manifest: Manifest) -> list[str]:
    from datetime import timedelta

    from torch.distributed import TCPStore

    # Ranks make their streams in the same order, so the n-th listing of a path matches across ranks.
    n = _checks[manifest.root] = _checks.get(manifest.root, 0) + 1
    store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                     timeout=timedelta(seconds=300))
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    key = f"air/manifest/{manifest.root}/{n}"
    store.set(f"{key}/{rank}", manifest.fingerprint)
    return [store.get(f"{key}/{r}").decode() for r in range(world)]


def _dist():
    """torch.distributed when a process group is initialised, else None (never imports torch)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return None
    return torch.distributed


__all__ = ["Manifest", "list_folder", "shared_manifest", "check_same", "VolumePathError"]
