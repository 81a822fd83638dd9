"""air_core: the cache-and-partition core behind the uc-volume loaders.

`FileStream` streams the files of a Unity Catalog volume folder, cached on
node-local disk on first access, partitioned over (rank x DataLoader worker).
`export_delta` exports a Delta table to Parquet on a volume (`air_core.delta`;
loaded on first use, with the `delta` extra).
"""

from .cache import Cache, CacheStats, default_dir
from .errors import (
    AirError, EmptyVolumeError, FetchError, ManifestMismatchError, OptionError, StateError, VolumePathError,
)
from .grid import Grid
from .manifest import Manifest, list_folder
from .resume import run_state
from .stream import CachedFile, FileStream, read_items

__all__ = [
    "AirError", "Cache", "CacheStats", "CachedFile", "EmptyVolumeError", "FetchError", "FileStream", "Grid",
    "Manifest", "ManifestMismatchError", "OptionError", "StateError", "VolumePathError", "default_dir",
    "export_delta", "list_folder", "read_items", "run_state",
]


def __getattr__(name: str):
    # Lazily, so that importing air_core loads neither pyarrow nor deltalake.
    if name == "export_delta":
        from .delta import export_delta

        return export_delta
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
