"""JSON: a row per JSON object, parsed by pyarrow: one per line (`.jsonl`, `.ndjson`), or, in a `.json` file (mode="json",
or with `media=`), the objects of its top-level array or its objects one after another, found by an index
(`json_array`): LLaVA's and ShareGPT4V's files of GBs are read by ranges, never whole.

Types are inferred from a fixed sample at the start of the listing (its first
MiB of records, read by range: the same on every process) or given with
`schema=` (HF's `features=`); a record that does not fit them is an error
naming its field, file and line.

Python rows (`JsonFormat.rows`) are decoded by msgspec into the schema's
types, without a table: pyarrow's parse and the table's conversion cost about
twice as much. Only types whose values msgspec gives exactly as the table's
conversion would are decoded so (integers in range, float64, bool, strings,
nulls, and lists and structs of them); a run that holds any record msgspec
refuses is parsed by pyarrow, which raises or skips as ever.
"""

from __future__ import annotations

import gc
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Annotated, ClassVar, Optional

from ..errors import RecordError
from . import AUTO_EXTENSIONS
from .lines import Buffer, Format, LinesReader

if TYPE_CHECKING:
    import pyarrow as pa

BLOCK_BYTES = 4 << 20
_CHANGED = re.compile(r"Column\(/?([^)]*)\) changed from (\w+) to (\w+)")
_ROW = re.compile(r"in row (\d+)")
# An integer -0 (not -0.0, -0e1): pyarrow gives -0.0 in a float column, msgspec 0.0 (an integer has no sign).
_INTEGER_MINUS_ZERO = re.compile(rb"-0(?![0-9.eE])")


@dataclass(frozen=True)
class JsonFormat(Format):
    """Objects into `schema`'s columns; `columns`: parse only these (the other fields are skipped)."""

    schema: pa.Schema
    columns: tuple[str, ...] | None = None
    # A span's rows made at once (~30 MB of objects for 16 MiB of chat records) leave the CPU's cache before they
    # are used, and their memory goes back to the system, to be faulted in again for the next span: that cost
    # twice the decode (in one process, 2.8-3.8 µs a chat record made and used, against 1.0-1.1 in 256 KiB runs).
    row_run_bytes: ClassVar[int | None] = 256 << 10
    objects: ClassVar[tuple[str, ...]] = (".json",)

    def parse(self, data: Buffer, *, first: bool) -> pa.Table:
        import pyarrow as pa
        import pyarrow.json as pj

        from .arrow_owned import owned

        schema = self.schema if self.columns is None else pa.schema([self.schema.field(c) for c in self.columns])
        if not len(data):  # blank lines alone parse to no rows as well
            return schema.empty_table()
        if not schema:  # no columns (a count): rows still come one per record
            return JsonFormat(self.schema, self.schema.names[:1]).parse(data, first=first).select([])
        options = pj.ParseOptions(explicit_schema=schema, newlines_in_values=False,
                                  unexpected_field_behavior="error" if self.columns is None else "ignore")
        block = BLOCK_BYTES
        while True:
            try:
                table = pj.read_json(pa.BufferReader(owned(data)), read_options=pj.ReadOptions(block_size=block),
                                     parse_options=options)
                return table.select(schema.names)
            except pa.ArrowInvalid as e:
                if "straddling" not in str(e) or block >= len(data):
                    raise
                block = len(data) + 1  # a record longer than a block: parse in one

    def rows(self, data: Buffer, *, first: bool) -> list[dict[str, Any]] | None:
        import msgspec

        decoder = _decoder(self.schema, self.columns)
        if decoder is None:
            return None
        json_decoder, floats = decoder
        if floats and _INTEGER_MINUS_ZERO.search(data):
            return None
        # A run's rows are made all at once, and all live on: with the collector on, each 700 of them set off a
        # collection and the older generations' in turn, which cost twice the decode in a process holding as many
        # objects as one that imported datasets. Paused, they are looked at once, when it resumes. (Left as it
        # is where it was off; another thread that turns it off meanwhile finds it on again after this.)
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            return msgspec.to_builtins(json_decoder.decode_lines(data))
        except msgspec.DecodeError:  # also a value that does not fit (ValidationError): pyarrow's parse says why
            return None
        finally:
            if paused:
                gc.enable()

    def explain(self, line: bytes) -> str | None:
        """What is wrong with one record, in the user's words; None: the parser's say."""
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            return f"not a valid JSON object ({e.msg.removesuffix(' at')} at column {e.colno})"
        except UnicodeDecodeError as e:
            return f"not UTF-8 text ({e.reason} at column {e.start + 1})"
        if not isinstance(record, dict):
            return f"a JSON {type(record).__name__}, where each line must hold one object"
        names = self.schema.names
        extra = [k for k in record if k not in names]
        if extra and self.columns is None:
            return (f"field {extra[0]!r} is not among the features {names} (inferred from the records at the start "
                    "of the listing, or given): pass features= (schema= for Ray) naming every field and its type")
        try:
            self.parse(line, first=False)
        except Exception as e:  # noqa: BLE001 - its words, said better when they name a column
            found = _CHANGED.search(str(e))
            if found:
                field, was, now = found.groups()
                field = field.replace("/", ".")
                return (f"field {field!r} holds a {now} where the features have a {was} "
                        f"({self.schema.field(field.split('.')[0]).type}): pass features= (schema= for Ray) "
                        "with the type it has")
            return f"{e}: pass features= (schema= for Ray) with the types the records have"
        return None


@lru_cache(maxsize=16)
def _decoder(schema: pa.Schema, columns: tuple[str, ...] | None) -> tuple[Any, bool] | None:
    """A msgspec decoder of records into `schema`'s columns (`columns` alone, when given) as `JsonFormat.parse`
    parses them, made once per format; and whether it decodes floats. None: a type msgspec does not give as
    pyarrow's conversion does (float32, timestamps, binary, ...), or no columns."""
    import msgspec

    fields = list(schema) if columns is None else [schema.field(c) for c in columns]
    if not fields:
        return None
    # pyarrow refuses fields the schema lacks, at every depth, unless some columns are chosen: then it skips them.
    strict = columns is None
    floats: list[bool] = []

    def struct(name: str, children: list) -> Any:
        types = [value(f.type, f.nullable) for f in children]
        if any(t is None for t in types):
            return None
        # Fields named f0, f1, ... and renamed to their keys: a key need not be a Python name. Each missing from a
        # record is None, as in pyarrow (a field that may not be null is required: pyarrow's parse decides).
        # Untracked by the garbage collector (gc=False): a decoded record is a tree, never in a cycle, and lives
        # only until it is converted; tracked, the collections its allocations set off cost ~40% of the decode.
        return msgspec.defstruct(name, [(f"f{i}", t, None) if f.nullable else (f"f{i}", t)
                                        for i, (f, t) in enumerate(zip(children, types))],
                                 kw_only=True, forbid_unknown_fields=strict, gc=False,
                                 rename={f"f{i}": f.name for i, f in enumerate(children)})

    def value(t: pa.DataType, nullable: bool) -> Any:
        import pyarrow.types as pt

        if pt.is_null(t):
            return None.__class__
        if pt.is_boolean(t):
            base: Any = bool
        elif pt.is_integer(t):  # out of range: refused, as pyarrow refuses it
            signed, bits = pt.is_signed_integer(t), t.bit_width
            low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            base = Annotated[int, msgspec.Meta(ge=low, le=high)]
        elif pt.is_float64(t):  # a JSON integer there is a float, in msgspec as in pyarrow
            floats.append(True)
            base = float
        elif pt.is_string(t) or pt.is_large_string(t):
            base = str
        elif pt.is_list(t):  # not large_list: pyarrow's JSON reader refuses it
            item = value(t.value_type, t.value_field.nullable)
            base = None if item is None else list[item]  # type: ignore[valid-type]
        elif pt.is_struct(t):
            base = struct("Struct", [t.field(i) for i in range(t.num_fields)])
        else:
            return None
        return None if base is None else Optional[base] if nullable else base

    record = struct("Record", fields)
    return None if record is None else (msgspec.json.Decoder(record), bool(floats))


class JsonReader(LinesReader):
    """JSON Lines files: a row per object, its fields as columns."""

    mode = "json"
    label = "JSON Lines"
    extensions = AUTO_EXTENSIONS[mode]
    readable = ("json",)
    objects = JsonFormat.objects

    def format(self) -> JsonFormat:
        return JsonFormat(self.schema())

    def infer(self, sample: list[tuple[str, bytes]]) -> pa.Schema:
        import pyarrow as pa
        import pyarrow.json as pj

        from .arrow_owned import owned

        data = b"".join(run if run.endswith(b"\n") else run + b"\n" for _, run in sample if run)
        try:
            return pj.read_json(pa.BufferReader(owned(data)),
                                read_options=pj.ReadOptions(block_size=len(data) + 1)).schema
        except pa.ArrowInvalid as e:
            # Malformed records say nothing of types: they are refused (or skipped) where they are read.
            sound = b"\n".join(line for line in data.split(b"\n") if _is_object(line))
            if sound != data.rstrip(b"\n") and sound.strip():
                try:
                    return pj.read_json(pa.BufferReader(owned(sound)),
                                        read_options=pj.ReadOptions(block_size=len(sound) + 1)).schema
                except pa.ArrowInvalid:
                    pass
            raise RecordError(f"{_where(sample, str(e))}: the records at the start of the listing, from which the "
                              f"features are inferred, {_disagreement(str(e))}: fix the records, or pass features= "
                              "(schema= for Ray) with their types") from None


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, UnicodeDecodeError):
        return False


def _disagreement(error: str) -> str:
    found = _CHANGED.search(error)
    if found is None:
        return f"do not parse ({error})"
    field, was, now = found.groups()
    return f"disagree: field {field.replace('/', '.')!r} holds a {now} here, a {was} before"


def _where(sample: list[tuple[str, bytes]], error: str) -> str:
    """The file and line of pyarrow's "in row N" (records count, blank lines do not) in the joined sample."""
    found = _ROW.search(error)
    row = int(found.group(1)) if found else 0
    for vpath, run in sample:
        lines = [k for k, line in enumerate(run.split(b"\n")) if line.strip()]
        if row < len(lines):
            return f"{vpath}, line {lines[row] + 1}"
        row -= len(lines)
    return sample[0][0] if sample else "?"
