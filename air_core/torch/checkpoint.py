"""torch.distributed.checkpoint storage on Unity Catalog volumes.

`UCVolumeWriter` stages every file on local disk and copies it to the volume
in one sequential write (what a FUSE volume does well; no random writes over
the network), or one whole-object `PUT` over the Files API. A checkpoint becomes readable all at once: the old `.metadata`
is removed before any file is written, and the new one is renamed into place
after every rank's files are on the volume. `UCVolumeReader` reads through
the node cache, so the ranks of a node fetch each file once.

    import torch.distributed.checkpoint as dcp
    from air_core.torch import UCVolumeReader, UCVolumeWriter

    state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "data": loader.state_dict()}
    dcp.save(state, storage_writer=UCVolumeWriter("/Volumes/main/ml/ckpt/step_1000"))
    dcp.load(state, storage_reader=UCVolumeReader("/Volumes/main/ml/ckpt/step_1000"))

`dcp.async_save(state, storage_writer=UCVolumeWriter(path))` works the same way.

For one file, `torch.save` and `torch.load` take the volume's local path (on
Databricks the volume path itself; elsewhere `air_core.io.volume.parse(path).local`):

    torch.save(model.state_dict(), air_core.io.volume.parse("/Volumes/main/ml/ckpt/model.pt").local)
    weights = torch.load(air_core.io.volume.parse("/Volumes/main/ml/ckpt/model.pt").local)

`torch.save` writes its zip archive sequentially, which volumes accept.
"""

from __future__ import annotations

import io
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Generator

from torch.distributed.checkpoint.filesystem import FileSystemBase, FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.planner import SavePlan

from ..doors import Cache, VolumePathError, retrying, transport, volume


class _VolumeFileSystem(FileSystemBase):
    """DCP's file operations on volume paths: writes staged locally, reads through the node cache."""

    def __init__(self) -> None:
        self._cache: Cache | None = None

    @property
    def cache(self) -> Cache:
        if self._cache is None:
            self._cache = Cache()
        return self._cache

    @staticmethod
    def _local(path: str | os.PathLike) -> str:
        return volume.parse(path).local

    def init_path(self, path: str | os.PathLike) -> Path:
        return Path(volume.parse(path).path)

    def concat_path(self, path: str | os.PathLike, suffix: str) -> Path:
        return Path(path) / suffix

    @contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Generator[io.IOBase, None, None]:
        vp = volume.parse(path)
        if "r" in mode:
            with self._open_cached(vp) as f:
                yield f  # type: ignore[misc]
            return
        staging = os.path.join(self.cache.root, "staging")
        os.makedirs(staging, mode=0o700, exist_ok=True)
        fd, staged = tempfile.mkstemp(dir=staging, suffix="-" + os.path.basename(vp.path))
        try:
            with os.fdopen(fd, mode) as f:
                yield f  # type: ignore[misc]
            transport.write_file(vp.local, staged)
        finally:
            os.unlink(staged)

    def _open_cached(self, vp: volume.VolumePath) -> BinaryIO:
        """The file open for reading: its copy in the node cache, or past a full cache the volume's file
        (over the Files API, one whose reads are ranged requests)."""
        def fetch() -> BinaryIO:
            size, mtime_ns = transport.stat(vp.local)
            copy = self.cache.get(vp.local, vp.path, size, mtime_ns)
            return open(copy, "rb") if copy is not None else transport.open_read(vp.local, size, mtime_ns)

        return retrying(fetch, vp.path)

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        transport.rename(self._local(path), self._local(new_path))

    def mkdir(self, path: str | os.PathLike) -> None:
        transport.make_dirs(self._local(path))

    def exists(self, path: str | os.PathLike) -> bool:
        local = self._local(path)
        return transport.is_file(local) or transport.is_dir(local)

    def rm_file(self, path: str | os.PathLike) -> None:
        transport.remove(self._local(path))

    def ls(self, path: str | os.PathLike) -> list[str]:
        return [str(Path(path) / name) for name in transport.listdir(self._local(path))]

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        try:
            volume.parse(checkpoint_id)
        except VolumePathError:
            return False
        return True


class UCVolumeWriter(FileSystemWriter):
    """StorageWriter for a checkpoint folder on a Unity Catalog volume.

    Every file is staged on local disk, then copied to the volume; the
    checkpoint's `.metadata` appears last (see the module docs). Works with
    `dcp.save` and `dcp.async_save`.

    Args:
        path: the checkpoint folder, `/Volumes/<catalog>/<schema>/<volume>/...`.
        **kwargs: passed on to `torch.distributed.checkpoint.FileSystemWriter`
            (`single_file_per_rank`, `thread_count`, `cache_staged_state_dict`, ...).
    """

    def __init__(self, path: str | os.PathLike, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.fs = _VolumeFileSystem()
        self.path = self.fs.init_path(path)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        plan = super().prepare_local_plan(plan)
        if not self.use_collectives and self.rank is not None:
            self._unpublish(self._get_metadata_path(self.rank))
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # Runs on the coordinator before any rank writes: a reader must never pair
        # an old .metadata with new, half-written files.
        self._unpublish(self._get_metadata_path())
        return super().prepare_global_plan(plans)

    def _unpublish(self, metadata_path: os.PathLike) -> None:
        if self.fs.exists(metadata_path):
            self.fs.rm_file(metadata_path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        return _VolumeFileSystem.validate_checkpoint_id(checkpoint_id)


class UCVolumeReader(FileSystemReader):
    """StorageReader for a checkpoint folder on a Unity Catalog volume, read through the node cache.

    Args:
        path: the checkpoint folder, `/Volumes/<catalog>/<schema>/<volume>/...`.
        **kwargs: passed on to `torch.distributed.checkpoint.FileSystemReader`.
    """

    def __init__(self, path: str | os.PathLike, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.fs = _VolumeFileSystem()
        self.path = self.fs.init_path(path)
        _check_checkpoint(str(self.path))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        return _VolumeFileSystem.validate_checkpoint_id(checkpoint_id)


def _check_checkpoint(path: str) -> None:
    """Refuse a folder that holds no finished checkpoint now, not from inside `dcp.load`'s collectives."""
    local = volume.parse(path).local
    if not transport.is_dir(local):
        raise VolumePathError(f"{path} does not exist: give the folder that dcp.save(..., "
                              "storage_writer=UCVolumeWriter(folder)) wrote")
    if not any(n.endswith(".metadata") for n in transport.listdir(local)):
        raise VolumePathError(f"{path} holds no checkpoint (no .metadata file): give the folder that dcp.save "
                              "wrote, after the save has finished (the writer publishes .metadata last)")
