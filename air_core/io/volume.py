"""Unity Catalog volume paths and their local counterpart.

On Databricks `/Volumes/<catalog>/<schema>/<volume>/...` is a FUSE mount. Off
Databricks, `AIR_VOLUMES_ROOT` names a local folder that stands for `/Volumes`
(the demo, the tests and the notebooks use this). A volume that the folder
standing for `/Volumes` does not hold is reached over the Files API where
credentials are configured (`air_core.io.transport`, which decides per
volume); there a path has no local counterpart: its `local` is the volume path
itself. Paths may also be given as `dbfs:/Volumes/...`.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

from ..errors import VolumePathError
from . import transport
from .transport import VOLUMES_ROOT_ENV
_SHAPE = "/Volumes/<catalog>/<schema>/<volume>/<path...>"


@dataclass(frozen=True)
class VolumePath:
    """A validated volume path.

    Attributes:
        path: the canonical volume path, `/Volumes/c/s/v/...` (no trailing slash).
        volume: the volume's root, `/Volumes/c/s/v`.
        local: where the path lives on this machine (differs from `path` when
            `AIR_VOLUMES_ROOT` is set; over the Files API, `path` itself).
        local_volume: where the volume's root lives on this machine.
    """

    path: str
    volume: str
    local: str
    local_volume: str

    def to_volume(self, local_path: str) -> str:
        """Map a local path under this volume to its volume path."""
        return self.volume + local_path[len(self.local_volume):]


def volumes_root() -> str:
    """The local folder that stands for `/Volumes` (`/Volumes` itself unless overridden)."""
    return os.environ.get(VOLUMES_ROOT_ENV) or transport.FUSE_ROOT


def parse(path: str | os.PathLike | VolumePath) -> VolumePath:
    """Validate a volume path's shape and map it onto this machine.

    Accepts `/Volumes/c/s/v/...` and `dbfs:/Volumes/c/s/v/...`, and returns a
    `VolumePath` as it is: a layer passes down what it parsed, and the layers
    below take it without parsing again. Raises `VolumePathError` for any
    other shape and for `..` segments; existence is checked by `require_dir`.
    """
    if isinstance(path, VolumePath):
        return path
    raw = os.fspath(path)
    if not isinstance(raw, str):
        raise VolumePathError(f"volume path must be a string, got {type(raw).__name__}")
    text = raw[len("dbfs:"):] if raw.startswith("dbfs:") else raw
    parts = text.split("/")
    if ".." in parts:
        raise VolumePathError(
            f"{raw!r}: '..' is not allowed in a volume path; give the path inside the volume directly"
        )
    parts = text.rstrip("/").split("/")
    if len(parts) < 5 or parts[0] != "" or parts[1] != "Volumes" or not all(parts[2:5]):
        raise VolumePathError(
            f"{raw!r} is not a Unity Catalog volume path: expected {_SHAPE} "
            f"(or dbfs:{_SHAPE}); on a machine without /Volumes set {VOLUMES_ROOT_ENV} "
            "to the local folder that stands for /Volumes"
        )
    text = posixpath.normpath(text)
    volume = "/".join(parts[:5])
    if transport.remote(text) is not None:
        return VolumePath(path=text, volume=volume, local=text, local_volume=volume)
    root = volumes_root().rstrip("/") or "/"
    local_volume = root + volume[len("/Volumes"):]
    return VolumePath(
        path=text, volume=volume, local=local_volume + text[len(volume):], local_volume=local_volume
    )


def require_dir(vp: VolumePath) -> None:
    """Raise a clear error unless the path is an existing folder inside its volume."""
    api = transport.remote(vp.local)
    if api is not None:
        kind = api.kind(vp.path)
        if kind is None:
            volume_there = vp.path != vp.volume and api.kind(vp.volume) == "dir"
            raise VolumePathError(f"{vp.path} does not exist"
                                  + ("" if volume_there else f"; the volume {vp.volume} itself is not there")
                                  + f" (read over the Files API of {api.host} {transport.why_files_api(vp.volume)})")
        if kind == "file":
            raise VolumePathError(
                f"{vp.path} is a file, but a folder is expected: give the folder that holds the data")
        return
    if not os.path.lexists(vp.local):
        hint = ""
        if not os.path.isdir(vp.local_volume):
            hint = f"; the volume {vp.volume} itself is not there ({transport.why_fuse(vp.volume)})"
        raise VolumePathError(f"{vp.path} does not exist{hint}")
    check_inside(vp, vp.local)
    if not os.path.isdir(vp.local):
        raise VolumePathError(
            f"{vp.path} is a file, but a folder is expected: give the folder that holds the data"
        )


def check_inside(vp: VolumePath, local_path: str) -> str:
    """Resolve symlinks in `local_path`; raise unless the result stays inside the volume.

    The Files API has no symlinks: a path there is returned as is.
    """
    if local_path.startswith(vp.volume + "/") and transport.remote(local_path) is not None:
        return local_path
    real = os.path.realpath(local_path)
    base = os.path.realpath(vp.local_volume)
    if real != base and not real.startswith(base.rstrip("/") + "/"):
        raise VolumePathError(
            f"{vp.to_volume(local_path)} resolves to {real}, outside the volume {vp.volume}: "
            "symlinks must not lead out of the volume; copy the data into it instead"
        )
    return real
