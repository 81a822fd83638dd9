"""Parquet trees, a row per table row: the units are row groups, cut into exact row ranges where counts must match.

The Parquet I/O (footers, schema, reading row groups through the cache)
lives in `air_core.read.parquet_io`, loaded on first use: importing the core loads
no pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from ..errors import EmptyVolumeError, ParquetError
from ..manifest import Manifest
from ..planning.rows import RowGroup, RowSlice, piece_bytes, unit_of
from ..planning.shares import Planning
from . import AUTO_EXTENSIONS
from .reader import Part, TableReader
from .row_groups import RowGroupPieces, localize

if TYPE_CHECKING:
    import pyarrow as pa

    from ..io.cache import Cache

_FILES_ONLY = ("files mode: {path} is read as Parquet, whose rows are the tables' rows (skipping a file would drop "
               "rows of the table); pass mode='files' to read Parquet files as files")


class ParquetReader(RowGroupPieces, TableReader):
    """The rows of a tree of Parquet files of one schema, hive partition folders kept as string columns."""

    mode = "parquet"
    label = "Parquet"
    extensions = AUTO_EXTENSIONS[mode]
    refused = dict.fromkeys(("decode", "labels", "on_error", "include_bytes"), _FILES_ONLY)

    def units(self) -> list[RowGroup]:
        """Every row group of every file, in order (footers read once per process)."""
        from . import parquet_io

        return self.source.held("units", lambda: parquet_io.parquet_units(self.source.manifest,
                                                                          cache=self._footer_cache()))

    def counted(self) -> list[RowGroup]:
        """`units()`: a row group's rows are counted in its file's footer."""
        return self.units()

    def validate(self) -> None:
        if not sum(u.num_rows for u in self.units()):
            raise EmptyVolumeError(f"{self.source.path} holds Parquet files but no rows")

    def pieces(self, files: Sequence[int]) -> list[RowGroup]:
        member = set(files)
        return [u for u in self.units() if u.file in member]

    def schema(self) -> pa.Schema:
        """The schema given, or the tables', hive partition columns appended as strings."""
        from . import parquet_io

        given = self.source.options.get("schema")
        return given or self.source.held("schema", lambda: parquet_io.schema(self.source.manifest, self.units(),
                                                                             self._footer_cache()))

    def _footer_cache(self) -> Cache:
        from ..io.cache import Cache

        return Cache(self.source.cache_dir)

    def read_pieces(self, pieces: Sequence[RowGroup | RowSlice], cache: Cache, *, columns: Sequence[str] | None,
                    fetch_threads: int, planning: Planning = Planning(), epoch: int = 0,
                    on_error: str = "raise", skipped: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        from . import parquet_io

        tables = parquet_io.read_units(self.source.manifest, pieces, cache, columns=columns,
                                    fetch_threads=fetch_threads)
        return enumerate(cast_to(tables, self.source.options.get("schema")))

    def part(self, pieces: Sequence[RowGroup | RowSlice], planning: Planning, *, epoch: int) -> ParquetPart:
        return self.parts([pieces], planning, epoch=epoch)[0]

    def parts(self, groups: Sequence[Sequence[RowGroup | RowSlice]], planning: Planning, *,
              epoch: int) -> list[ParquetPart]:
        """Parts read on one node: only a file that the node reads some of is read by ranges. One that the
        parts read all of between them is fetched whole by each (the node cache serves all but the first), as
        a single part reading it would: Ray may run the parts one after another, and the ranges of a later
        one would then be fetched on their own, not with the first's."""
        from . import parquet_io

        m = self.source.manifest
        ranged = parquet_io.ranged_files([unit_of(p) for g in groups for p in g], m.sizes)
        out = []
        for pieces in groups:
            files, local = localize(pieces)
            out.append(ParquetPart(m.root, self.source.local, m.fingerprint, m.rows(files), local,
                                   self.source.options.get("schema"),
                                   frozenset(k for k, f in enumerate(files) if f in ranged)))
        return out


def cast_to(tables: Iterable[pa.Table], schema: pa.Schema | None) -> Iterator[pa.Table]:
    """`tables`, each cast to `schema`'s types of its columns (as they are, without one)."""
    import pyarrow as pa

    for table in tables:
        if schema is None:
            yield table
            continue
        try:
            yield table.cast(pa.schema([schema.field(c) for c in table.column_names]))
        except (pa.ArrowException, KeyError) as e:
            raise ParquetError(f"rows of columns {table.schema} do not fit the features given ({e}): give "
                               "features= (schema= for Ray) the tables' columns can be cast to") from None


@dataclass(frozen=True)
class ParquetPart(Part):
    """Row groups to read elsewhere: their files' rows of the listing, the pieces numbered over them, and which
    of those files are read by ranges (the others whole)."""

    root: str
    local_root: str
    fingerprint: str
    listing: list[tuple[str, int, int]]
    pieces: list[RowGroup | RowSlice]
    schema: pa.Schema | None
    ranged: frozenset[int]

    @property
    def rows(self) -> int:
        return sum(p.num_rows for p in self.pieces)

    @property
    def nbytes(self) -> int:
        return sum(piece_bytes(p) for p in self.pieces)

    @property
    def input_files(self) -> list[str]:
        return [f"{self.root}/{r[0]}" for r in self.listing]

    def read(self, cache: Cache, *, fetch_threads: int = 16, prefetch: int = 16, prefetch_bytes: int = 1 << 30,
             on_error: str = "raise", columns: Sequence[str] | None = None) -> Iterator[tuple[str, pa.Table]]:
        from . import parquet_io

        manifest = Manifest.from_rows(self.root, self.listing, self.fingerprint)
        tables = parquet_io.read_units(manifest, self.pieces, cache, columns=columns, fetch_threads=fetch_threads,
                                       prefetch=prefetch, prefetch_bytes=prefetch_bytes, local_root=self.local_root,
                                       ranged=self.ranged)
        for piece, table in zip(self.pieces, self._rows(tables)):
            yield manifest.volume_path(unit_of(piece).file), table

    def _rows(self, tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
        """The row groups' tables as this part delivers them: cast to the schema given, if any."""
        return cast_to(tables, self.schema)
