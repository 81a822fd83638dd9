"""The versions (size, mtime) of the media a job has read, kept in the node cache per run of records, so that a
later pass finds each medium's cached copy without asking the volume.

Media are never listed: a medium's version, its key in the node cache, is
learnt by a `stat` of it on the volume the first time a job reads it. What
each run of records (the records a reader yields at once) learnt is written
to a small file, `16 bytes` a medium, named by the job (`Source.job`) and the
run's media; a later pass over the same records, in any process of the job,
reads that file and makes no call to the volume for a medium whose copy is
cached. Exactness: a new job looks at every medium again, so a medium
changed between jobs is fetched again; within a job a medium is read as it
was first read (as files mode reads its files as they were listed). A copy
missing from the cache is fetched with the version kept, and a medium changed
since is looked at again.

The files of a job live in one folder, `manifests/media/<job>` of the cache
(`air-data cache clear` removes them with the listings); a job's folder
untouched for `IN_USE_SECONDS` is removed by the next job that writes one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from typing import Sequence

import numpy as np

from ..io.cache import IN_USE_SECONDS

# Jobs whose folder this process has swept beside, or kept fresh, already.
_seen: set[str] = set()


def run_key(job: str, media: Sequence[str]) -> str:
    """The name of the file of a run of records naming `media` (volume paths, sorted, each once) in `job`."""
    digest = hashlib.blake2b(job.encode(), digest_size=16)
    digest.update("\0".join(media).encode())
    return digest.hexdigest()


def load(root: str, job: str, key: str, count: int) -> list[tuple[int, int]] | None:
    """The versions kept for the run `key` of `job` in the cache at `root`, one per medium in the order of the
    run's media; None: none kept (or not for `count` media)."""
    folder = _folder(root, job)
    try:
        with open(os.path.join(folder, key), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) != 16 * count:
        return None
    if job not in _seen:  # a job's folder read from is in use: not swept away by another job
        _seen.add(job)
        _touch(folder)
    pairs = np.frombuffer(data, dtype=np.int64).reshape(-1, 2).tolist()
    return [(size, mtime) for size, mtime in pairs]


def save(root: str, job: str, key: str, versions: Sequence[tuple[int, int]]) -> None:
    """Keep `versions` (one per medium, in the order of the run's media) for the run `key` of `job`."""
    folder = _folder(root, job)
    if job not in _seen:
        _seen.add(job)
        _sweep(os.path.dirname(folder), keep=job)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = os.path.join(folder, f".{key}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(np.asarray(versions, dtype=np.int64).tobytes())
    os.replace(tmp, os.path.join(folder, key))


def _folder(root: str, job: str) -> str:
    return os.path.join(root, "manifests", "media", job)


def _touch(folder: str) -> None:
    try:
        os.utime(folder)
    except OSError:
        pass


def _sweep(jobs: str, *, keep: str) -> None:
    """Remove the folders of jobs under `jobs` untouched for `IN_USE_SECONDS` (all but `keep`)."""
    cut = time.time() - IN_USE_SECONDS
    try:
        entries = list(os.scandir(jobs))
    except OSError:
        return
    for e in entries:
        try:
            if e.name != keep and e.stat().st_mtime < cut:
                shutil.rmtree(e.path, ignore_errors=True)
        except OSError:
            continue


__all__ = ["load", "run_key", "save"]
