"""air_core: the cache-and-partition core behind the uc-volume loaders.

`FileStream` streams the files of a Unity Catalog volume folder, cached on
node-local disk on first access, partitioned over (rank x DataLoader worker).
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
    "list_folder", "read_items", "run_state",
]
