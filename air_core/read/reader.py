"""A reader: everything about reading one data format that does not depend on the front door.

A front door (`FileStream`, the `uc-volume` builder, `UCVolumeDatasource`,
`UCVolumeDataset`) resolves a `Source`, takes its `reader` and keeps only its
ecosystem's concerns; the reader owns what depends on the format: which of
the door's options apply to it (one wording for every door), its units of
work and their shares of a grid, and how they are read through the node
cache and the fetch pool.

Two kinds of rows: a row per file (a `FileRowsReader`: loose files, a
pack's files), which each door turns into its own row type (HF features
with `decode=`, Ray's `bytes` column, torch paths), or the format's own rows
(a `TableReader`: a table's, with a schema), which pass through. A new
format is a subclass of one of them in a module of its own, named in
`air_core.read.FORMATS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Sequence

import numpy as np

from ..errors import OptionError
from ..planning.shares import Planning

if TYPE_CHECKING:
    import pyarrow as pa

    from ..io.cache import Cache
    from ..grid import Grid
    from ..manifest import Manifest
    from ..planning.shares import Equalize
    from ..source import Source
    from ..io.files import CachedFile, Skipped

# Rows of a table converted to Python rows at once (`TableReader.read_rows`).
ROWS_AT_ONCE = 1000
# What each option a door may pass to `check` means when left as it is: such a value is never refused.
_UNSET: dict[str, tuple[Any, ...]] = {
    "on_error": ("raise",), "balance": ("bytes",), "decode": ("path",), "labels": (False,),
    "include_bytes": (None, False), "columns": (None,),
}


class Reader:
    """How a `Source` of one format is planned and read; `Source.reader` gives the one for its mode.

    Attributes:
        mode: the format's name, as `mode=` takes it.
        counts: what its rows are, in messages: "files" or "rows".
        pieces_per_task: the fewest pieces worth one parallel read task (its start-up and warm-up cost more
            than fewer would read).
        refused: options that do not apply to this format -> what they apply to and why;
            `{path}` is filled in with the source's folder, as the user named it.
        label: the format's name in messages.
        extensions: mode="auto" reads a folder in this format when every file has one of these.
        readable: the extensions it reads besides, when its mode is given; None: any file.
        takes: the format options of `resolve_source` it reads (`schema`, `delimiter`, ...).
    """

    mode: ClassVar[str]
    counts: ClassVar[str]
    label: ClassVar[str]
    pieces_per_task: ClassVar[int] = 1
    refused: ClassVar[dict[str, str]] = {}
    extensions: ClassVar[tuple[str, ...]] = ()
    readable: ClassVar[tuple[str, ...] | None] = ()
    takes: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def suffixes(cls, *, given: bool) -> tuple[str, ...] | None:
        """The file name endings it reads: under mode="auto", or (`given`) when its mode is given; None: any."""
        if given and cls.readable is None:
            return None
        return tuple(f".{e}" for e in cls.extensions + (cls.readable or () if given else ()))

    def __init__(self, source: Source) -> None:
        self.source = source

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source.path!r})"

    def validate(self) -> None:
        """Refuse, when the source is resolved, a source of this format that cannot be read."""

    def own_listing(self) -> Manifest | None:
        """The format's own listing of its files, read where the source's saved listing is not (another
        machine); None: the folder is listed again."""
        return None

    def check(self, **options: Any) -> None:
        """Refuse, in the same words at every door, an option set (not left as is) that does not apply here.

        Raises:
            OptionError: naming the option, what it applies to, and why it does not apply to this source.
        """
        for name, value in options.items():
            if value not in _UNSET[name] and name in self.refused:
                raise OptionError(f"{name}= applies to {self.refused[name].format(path=self.source.given)}")

    # -- units of work ---------------------------------------------------------

    def pieces(self, files: Sequence[int]) -> list:
        """The units that hold `files` (listing positions, ascending): what shards and tasks are made of."""
        raise NotImplementedError

    def count(self, pieces: Sequence) -> int:
        """The rows `pieces` hold."""
        raise NotImplementedError

    def deal(self, pieces: Sequence, parts: int, planning: Planning) -> list[list]:
        """`pieces` dealt into `parts` balanced parts (equal counts of rows with `planning.equalize`), each in
        read order: a seeded one with `planning.shuffle`."""
        raise NotImplementedError

    def share(self, rank: int, world_size: int, planning: Planning, *, epoch: int) -> tuple[np.ndarray, list]:
        """`rank`'s pieces in `epoch`'s read order, and a key for each that no epoch changes.

        The same pieces every epoch, so a node's cache keeps serving them; the
        keys index `share_weights`.
        """
        raise NotImplementedError

    def share_weights(self, rank: int, world_size: int, *, equalize: Equalize) -> np.ndarray:
        """The bytes of every piece `rank` may read, by the keys `share` gives."""
        raise NotImplementedError

    def weights(self, pieces: Sequence) -> list[int]:
        """The bytes of each of `pieces`: what parallel work is balanced by."""
        raise NotImplementedError

    def part(self, pieces: Sequence, planning: Planning, *, epoch: int) -> Part:
        """A unit of parallel work over `pieces`, small enough to travel: it carries only its own part of the
        listing. `epoch` and the planning's `seed` and `shuffle` order the rows inside the pieces."""
        raise NotImplementedError

    def parts(self, groups: Sequence[Sequence], planning: Planning, *, epoch: int) -> list[Part]:
        """A `part` over each of `groups`: parts read on one node, through its cache."""
        return [self.part(g, planning, epoch=epoch) for g in groups]


class Part:
    """Pieces of one source packed to travel to another process (a Ray read task), with what they read.

    Attributes:
        rows: how many rows it yields.
        nbytes: the bytes it reads.
        input_files: the volume paths of the files it reads from.
        files: file rows: the listing positions of the files it yields, in order.
        largest: file rows: the largest file's size.
    """

    rows: int
    nbytes: int
    input_files: list[str]
    files: list[int]
    largest: int

    def read(self, cache: Cache, *, fetch_threads: int, prefetch: int, prefetch_bytes: int, on_error: str = "raise",
             columns: Sequence[str] | None = None) -> Iterator:
        """Its rows, through `cache`: `CachedFile`s (and `Skipped`, with `on_error="skip"`) for file rows,
        else (volume path, table) pairs, one per piece, of `columns` alone when given."""
        raise NotImplementedError


class FileRowsReader(Reader):
    """A format read as a row per file: its path, size and contents."""

    counts = "files"
    label = "files"

    def plan(self, grid: Grid, resumed_from: dict | None, planning: Planning, *, epoch: int
             ) -> list[int] | np.ndarray:
        """The files (listing positions) one stream reads in `epoch`, after resuming the run `resumed_from`: a
        list, or an int64 array where a share can be long (read a chunk at a time, `air_core.io.files.chunked`)."""
        raise NotImplementedError

    def plan_epoch(self, planning: Planning, epoch: int) -> int:
        """The epoch as far as `plan` depends on it: two epochs with one answer have the same plans (on one grid,
        from the epoch's start), so a stream may plan once for both."""
        return epoch

    def rank_count(self, rank: int, world_size: int, planning: Planning, *, epoch: int) -> int:
        """How many files `rank` reads in `epoch`, all its DataLoader workers together."""
        raise NotImplementedError

    def files_of(self, pieces: Sequence, planning: Planning) -> list[int]:
        """The files (listing positions) that `pieces` hold, in read order."""
        raise NotImplementedError

    def read_files(self, items: Sequence[int], cache: Cache, *, fetch_threads: int, on_error: str = "raise",
                   **fetch: int) -> Iterator[CachedFile | Skipped]:
        """The files `items` (listing positions), in order, through the node cache, fetched ahead.

        `fetch`: `prefetch` and `prefetch_bytes`, as `read_items` takes them.
        """
        raise NotImplementedError

    def sizes_of(self, files: Sequence[int]) -> np.ndarray:
        """The sizes of `files` (listing positions)."""
        return self.source.manifest.sizes[np.asarray(files, dtype=np.int64)]

    def largest(self) -> int:
        """The largest file's size."""
        return int(self.source.manifest.sizes.max())

    def path_lengths(self, files: Sequence[int]) -> np.ndarray:
        """The byte lengths of the volume paths of `files` (listing positions)."""
        m = self.source.manifest
        return m.paths.lengths(files) + (len(m.root) + 1)


class TableReader(Reader):
    """A format read as its own rows, with a schema (`schema=`, when given: the rows are read into it)."""

    counts = "rows"
    takes = ("schema",)
    # Whether `read_pieces` gives a piece's rows in their stored order under any planning (row groups do; a
    # shuffled span does not): a resumed stream then cuts the piece to the rows left rather than read and drop.
    rows_as_stored = False

    def schema(self) -> pa.Schema:
        """The rows' schema."""
        raise NotImplementedError

    def counted(self) -> list:
        """Every unit (a span, a row group, ...) with its rows counted, in listing order: where a unit's rows are
        known only once read, each is read once, by this process, through the node cache."""
        raise NotImplementedError

    def media(self) -> dict[str, str]:
        """Columns of bytes that are media files -> their kind ("image"): a door with a type of its own for such
        files (HF's `datasets.Image()`) gives them that; as they are, they stay bytes."""
        return {}

    def read_pieces(self, pieces: Sequence, cache: Cache, *, columns: Sequence[str] | None, fetch_threads: int,
                    planning: Planning = Planning(), epoch: int = 0,
                    on_error: str = "raise", skipped: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        """The pieces' rows, in order, as (position in `pieces`, table): one table or more per piece, through the
        node cache, fetched ahead; only `columns` when given. `epoch` and the planning's `seed` and `shuffle` order
        the rows inside a piece, where the format does; `on_error="skip"` leaves out a malformed record, where the
        format has records, and adds where it lay to `skipped`."""
        raise NotImplementedError

    def stream_pieces(self, pieces: list, planning: Planning, *, epoch: int) -> list:
        """One stream's planned pieces (a `RowStream`'s, a `uc-volume` shard's) as it reads them: as planned,
        here (a mixture of tables, `air_core.mixed_table`, interleaves its sources' rows with `shuffle`)."""
        return pieces

    def read_rows(self, pieces: Sequence, cache: Cache, **options: Any) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """The rows of `read_pieces` (same options) as Python rows, in lists, each with its piece's position in
        `pieces`: here its tables converted, `ROWS_AT_ONCE` rows at a time (a row group's rows all at once would
        hold them all in Python besides the table); a format that makes Python rows without a table (JSON Lines)
        makes them so."""
        for index, table in self.read_pieces(pieces, cache, **options):
            for start in range(0, table.num_rows, ROWS_AT_ONCE):
                yield index, table.slice(start, ROWS_AT_ONCE).to_pylist()

    def read_tables(self, pieces: Sequence, cache: Cache, **options: Any) -> Iterator[pa.Table]:
        """The tables of `read_pieces` (same options), without their pieces' positions."""
        for _, table in self.read_pieces(pieces, cache, **options):
            yield table


class FileRowsPart(Part):
    """A part of file rows, whose `listing` holds the (relative path, size, mtime_ns) of the files it yields."""

    listing: list[tuple[str, int, int]]

    @property
    def rows(self) -> int:
        return len(self.listing)

    @property
    def nbytes(self) -> int:
        return sum(r[1] for r in self.listing)

    @property
    def largest(self) -> int:
        return max((r[1] for r in self.listing), default=0)
