"""What the front doors (`air_hf`, `air_ray`, `air_core.torch`) take from the core: their one way in.

`air_core`'s own names are the user's API (the streams, `run_state`, `pack`,
`export_delta`, the errors). This module is the doors': resolving a source
and its reader, planning, the node cache and the fetch engine, option
checks, the process grid and volume paths. A door imports the core from here
alone, so what the core offers its doors is read in one place, and a module
of the core can move without a door noticing.

The names that load the listing, the streams or pyarrow (`resolve_source`
and its kin) load on first use, as `air_core`'s do: a Ray task or a
DataLoader worker that imports a door's reading half loads none of them.
"""

from typing import TYPE_CHECKING

from . import options
from .dist import detect_rank, freeze_inherited, process_group
from .errors import AirError, FetchError, OptionError, StateError, VolumePathError
from .grid import Grid
from .io import transport, volume
from .io.cache import Cache, default_dir, entry_path_length
from .io.fetch import retrying
from .lazy import exports
from .manifest import Manifest
from .planning.resume import VERSION, upgrade
from .planning.shares import EQUALIZES, Balance, Equalize, Planning, snake
from .read import (DEFAULT_FETCH_THREADS, DEFAULT_PREFETCH, DEFAULT_PREFETCH_BYTES, ON_ERRORS, CachedFile, OnError,
                   Part, TableReader, default_fetch_threads, without_skips)

if TYPE_CHECKING:
    from .mixed_source import MixedSource, refuse_rows, resolve_sources
    from .mixed_table import MixedTable, resolve_mixture
    from .source import MODES, Mode, Source, check_columns, resolve_source
    from .row_stream import RowStream
    from .stream import FileStream

_LAZY = {
    "MODES": "air_core.source", "Mode": "air_core.source", "Source": "air_core.source",
    "check_columns": "air_core.source", "resolve_source": "air_core.source", "FileStream": "air_core.stream",
    "RowStream": "air_core.row_stream",
    "MixedSource": "air_core.mixed_source", "resolve_sources": "air_core.mixed_source",
    "MixedTable": "air_core.mixed_table", "resolve_mixture": "air_core.mixed_table",
    "refuse_rows": "air_core.mixed_source",
}

__all__ = [
    "AirError", "Balance", "Cache", "CachedFile", "DEFAULT_FETCH_THREADS", "DEFAULT_PREFETCH",
    "DEFAULT_PREFETCH_BYTES", "EQUALIZES", "Equalize", "FetchError", "FileStream", "Grid", "MODES", "Manifest",
    "MixedSource", "MixedTable", "Mode", "ON_ERRORS", "OnError", "OptionError", "Part", "Planning", "RowStream", "Source",
    "StateError", "TableReader", "VERSION", "VolumePathError", "check_columns", "default_dir",
    "default_fetch_threads", "detect_rank", "entry_path_length", "exports", "freeze_inherited",
    "options", "process_group", "refuse_rows", "resolve_mixture", "resolve_source", "resolve_sources", "retrying", "snake",
    "transport", "upgrade", "volume", "without_skips",
]


__getattr__, __dir__ = exports(__name__, _LAZY)
