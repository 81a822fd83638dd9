"""air_core: the cache-and-partition core behind the uc-volume loaders.

`FileStream` streams the files of a Unity Catalog volume folder, cached on
node-local disk on first access, partitioned over (rank x DataLoader worker);
`RowStream` streams the rows of a table there (Parquet, JSON Lines, CSV, text).
`resolve_source` is how every front door turns what a user gives into what
it reads (`resolve_sources`: a mixture of several folders of files;
`resolve_mixture`: of files or of tables' rows, as its sources are). The names here
are the core's public API; `air_core.read.parquet_io` (Parquet row groups,
needs pyarrow) and `air_core.torch` are public modules.
`export_delta` exports a Delta table to Parquet on a volume (`air_core.delta`;
loaded on first use, with the `delta` extra). `pack` packs a folder of small
files into Parquet shards that every front door reads as the loose files
(`air_core.pack`, which loads pyarrow when it runs).
"""

from typing import TYPE_CHECKING

from .lazy import exports

from .io.cache import Cache, CacheStats, default_dir, entry_path_length
from .dist import detect_rank, detect_worker, freeze_inherited
from .errors import AirError, EmptyVolumeError, FetchError, ManifestMismatchError, OptionError, ParquetError, StateError, VolumePathError
from .grid import Grid
from .manifest import Manifest
from .planning.shares import BALANCES, EQUALIZES, Balance, Equalize, epoch_order, rank_share, rank_shares, snake
from .planning.resume import run_state
from .read import DEFAULT_FETCH_THREADS, DEFAULT_PREFETCH, DEFAULT_PREFETCH_BYTES, ON_ERRORS, CachedFile, OnError, Skipped, default_fetch_threads, read_items, without_skips

if TYPE_CHECKING:
    from .delta import export_delta
    from .io.listing import list_folder
    from .mixed_source import MixedSource, resolve_sources
    from .mixed_table import MixedTable, resolve_mixture
    from .packs.write import PackResult, pack
    from .planning.rows import RowGroup, RowSlice, split_rows, unit_of
    from .row_stream import RowStream
    from .source import MODES, Mode, Source, check_columns, resolve_source
    from .stream import FileStream

# Loaded on first use: a Ray or DataLoader worker that reads what a driver planned needs the cache and the
# readers, not the doors, the listing or the packer (nor pyarrow or deltalake, which some of these load).
_LAZY = {
    "export_delta": ".delta", "list_folder": ".io.listing", "PackResult": ".packs.write", "pack": ".packs.write",
    "RowGroup": ".planning.rows", "RowSlice": ".planning.rows", "split_rows": ".planning.rows",
    "unit_of": ".planning.rows", "RowStream": ".row_stream", "MODES": ".source", "Mode": ".source",
    "Source": ".source", "check_columns": ".source", "resolve_source": ".source", "FileStream": ".stream",
    "MixedSource": ".mixed_source", "resolve_sources": ".mixed_source", "MixedTable": ".mixed_table",
    "resolve_mixture": ".mixed_table",
}

__all__ = [
    "AirError", "BALANCES", "Balance", "Cache", "CacheStats", "CachedFile", "DEFAULT_FETCH_THREADS",
    "DEFAULT_PREFETCH", "DEFAULT_PREFETCH_BYTES", "EQUALIZES", "EmptyVolumeError", "Equalize", "FetchError",
    "FileStream", "Grid", "MODES", "Manifest", "ManifestMismatchError", "MixedSource", "MixedTable", "Mode", "ON_ERRORS", "OnError",
    "OptionError",
    "ParquetError", "RowGroup", "RowSlice", "RowStream", "Skipped", "Source", "StateError", "VolumePathError", "check_columns",
    "default_dir", "default_fetch_threads", "detect_rank", "detect_worker", "entry_path_length", "epoch_order",
    "export_delta", "freeze_inherited", "list_folder", "pack", "PackResult", "rank_share", "rank_shares",
    "read_items", "resolve_mixture", "resolve_source", "resolve_sources", "run_state", "snake", "split_rows", "unit_of", "without_skips",
]


__getattr__, __dir__ = exports(__name__, _LAZY)
