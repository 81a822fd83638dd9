"""air_core: the cache-and-partition core behind the uc-volume loaders.

`FileStream` streams the files of a Unity Catalog volume folder, cached on
node-local disk on first access, partitioned over (rank x DataLoader worker);
`RowStream` streams the rows of a table there (Parquet, JSON Lines, CSV, text).
`resolve_source` is how every front door turns what a user gives into what
it reads. The names here are the user's API; `air_core.read.parquet_io`
(Parquet row groups, needs pyarrow) and `air_core.torch` are public modules.
What the front doors take from the core (mixtures, readers, planning, the
cache) is `air_core.doors`.
`export_delta` exports a Delta table to Parquet on a volume (`air_core.delta`;
loaded on first use, with the `delta` extra). `pack` packs a folder of small
files into Parquet shards that every front door reads as the loose files
(`air_core.pack`, which loads pyarrow when it runs).
"""

from typing import TYPE_CHECKING

from .lazy import exports

from .errors import (AirError, AuthError, EmptyVolumeError, FetchError, ManifestMismatchError, MediaError, OptionError,
                     ParquetError, RecordError, StateError, TableError, VolumePathError)
from .io.cache import default_dir
from .io.files import CachedFile
from .planning.resume import run_state

if TYPE_CHECKING:
    from .delta import export_delta
    from .packing import pack
    from .packs.write import PackResult
    from .row_stream import RowStream
    from .source import resolve_source
    from .stream import FileStream

# Loaded on first use: a Ray or DataLoader worker that reads what a driver planned needs the cache and the
# readers, not the doors, the listing or the packer (nor pyarrow or deltalake, which some of these load).
_LAZY = {
    "export_delta": ".delta", "PackResult": ".packs.write", "pack": ".packing", "RowStream": ".row_stream",
    "resolve_source": ".source", "FileStream": ".stream",
}

__all__ = [
    "AirError", "AuthError", "CachedFile", "EmptyVolumeError", "FetchError", "FileStream", "ManifestMismatchError",
    "MediaError", "OptionError", "PackResult", "ParquetError", "RecordError", "RowStream", "StateError",
    "TableError", "VolumePathError", "default_dir",
    "export_delta", "pack", "resolve_source", "run_state",
]


__getattr__, __dir__ = exports(__name__, _LAZY)
