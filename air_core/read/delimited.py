"""CSV and TSV: a row per record under the files' one header row, parsed by pyarrow.

The delimiter comes from the extension (`.tsv`: a tab) or `delimiter=`.
Every file's header is read when the source is resolved, and files whose
headers differ are refused then, before any rank reads. A record may not hold
a line break inside quotes where files are cut into spans (pyarrow's default
for CSV too): such a file parses wrongly at a cut, and says so.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..errors import OptionError, RecordError
from ..io import transport
from ..io.fetch import ordered_map
from . import AUTO_EXTENSIONS
from .lines import Buffer, Format, LinesReader, compression

if TYPE_CHECKING:
    import pyarrow as pa

HEADER_BYTES = 64 << 10
HEADER_THREADS = 32
BLOCK_BYTES = 4 << 20


@dataclass(frozen=True)
class CsvFormat(Format):
    """Records into `schema`'s columns, in its order; a file's first run starts with its header, skipped."""

    schema: pa.Schema
    delimiter: str
    columns: tuple[str, ...] | None = None
    header: ClassVar[bool] = True

    def parse(self, data: Buffer, *, first: bool) -> pa.Table:
        import pyarrow as pa
        import pyarrow.csv as pc

        from .arrow_owned import owned

        data = bytes(data)  # its header and blank checks search bytes: one copy, of this run alone

        names = self.schema.names
        wanted = list(self.columns) if self.columns is not None else names
        if first:  # the header row, read when the source was resolved
            data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
        if not data.strip():
            return pa.schema([self.schema.field(c) for c in wanted]).empty_table()
        return pc.read_csv(
            pa.BufferReader(owned(data)),
            read_options=pc.ReadOptions(column_names=names,
                                        block_size=max(BLOCK_BYTES, min(len(data) + 1, 64 << 20))),
            parse_options=pc.ParseOptions(delimiter=self.delimiter),
            convert_options=pc.ConvertOptions(column_types=self.schema, include_columns=wanted),
        )


class CsvReader(LinesReader):
    """CSV and TSV files of one header: a row per record."""

    mode = "csv"
    label = "CSV"
    extensions = AUTO_EXTENSIONS[mode]
    takes = ("schema", "delimiter")

    def delimiter(self) -> str:
        """The one given, or the extension's."""
        given = self.source.options.get("delimiter")
        if given is not None:
            return given
        kinds = {p.removesuffix("." + (compression(p) or "")).rsplit(".", 1)[-1].lower()
                 for p in self.source.manifest.paths.tolist()}
        if len(kinds) > 1:
            raise OptionError(f"{self.source.given} holds both .csv and .tsv files: give delimiter=, or select the "
                              "files of one kind with file_extensions=")
        return "\t" if kinds == {"tsv"} else ","

    def headers(self) -> list[str]:
        """The columns every file's header row names (read from the volume, every file's first line)."""
        return self.source.held("headers", self._read_headers)

    def _read_headers(self) -> list[str]:
        m, local, delimiter = self.source.manifest, self.source.local, self.delimiter()

        def header(i: int) -> list[str]:
            return _header(f"{local}/{m.paths[i]}", int(m.sizes[i]), int(m.mtimes[i]), m.volume_path(i), delimiter)

        first: list[str] | None = None
        for i, names in enumerate(ordered_map(header, ((i, 0) for i in range(len(m))), threads=HEADER_THREADS,
                                              max_ahead=4 * HEADER_THREADS, max_bytes=1 << 62)):
            if first is None:
                first = names
            elif names != first:
                raise OptionError(
                    f"{m.volume_path(i)} and {m.volume_path(0)} have different headers ({names} vs {first}): the "
                    "files read together must share one header; select the files of one header with "
                    "include=/exclude=, or read them as separate datasets")
        return first or []

    def validate(self) -> None:
        super().validate()
        delimiter = self.source.options.get("delimiter")
        if delimiter is not None and (not isinstance(delimiter, str) or len(delimiter) != 1):
            raise OptionError(f"delimiter={delimiter!r}: give one character, such as ',' or '\\t'")
        names = self.headers()
        if len(set(names)) < len(names) or not all(names):
            raise OptionError(f"{self.source.manifest.volume_path(0)}'s header {names} names a column twice or "
                              "leaves one unnamed: give every column its own name")

    def format(self) -> CsvFormat:
        return CsvFormat(self.schema(), self.delimiter())

    def infer(self, sample: list[tuple[str, bytes]]) -> pa.Schema:
        import pyarrow as pa
        import pyarrow.csv as pc

        from .arrow_owned import owned

        names = self.headers()
        schemas = []
        for vpath, run in sample:
            if not run.strip():
                continue
            try:
                schemas.append(pc.read_csv(pa.BufferReader(owned(run)),
                                           read_options=pc.ReadOptions(column_names=names, skip_rows=1),
                                           parse_options=pc.ParseOptions(delimiter=self.delimiter())).schema)
            except pa.ArrowInvalid as e:
                raise RecordError(f"the records at the start of {vpath} do not parse as CSV to infer their "
                                  f"features ({e}): fix them, or pass features= (schema= for Ray)") from None
        if not schemas:
            return pa.schema([pa.field(n, pa.string()) for n in names])
        return pa.unify_schemas(schemas, promote_options="permissive")


def _header(path: str, size: int, mtime_ns: int, vpath: str, delimiter: str) -> list[str]:
    import pyarrow as pa

    codec = compression(path)
    try:
        with transport.open_read(path, size, mtime_ns) as raw, \
                (pa.CompressedInputStream(pa.PythonFile(raw, "r"), codec) if codec else raw) as f:
            head = f.read(HEADER_BYTES)
    except (OSError, pa.ArrowException) as e:
        raise RecordError(f"{vpath}: its header cannot be read ({e}); remove or replace it, or leave it out with "
                          "exclude=") from None
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        return next(csv.reader([line.decode("utf-8-sig")], delimiter=delimiter))
    except (UnicodeDecodeError, StopIteration, csv.Error) as e:
        raise RecordError(f"{vpath}: its first line is not a header row of names ({e})") from None

