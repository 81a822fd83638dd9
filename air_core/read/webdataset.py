"""WebDataset shards: `.tar` files of samples, a row per sample, its members as columns.

A sample is the members of a tar that share a key: the member's path inside
the tar up to the first dot of its file name (`a/b/x.jpg`, `a/b/x.json` and
`a/b/x.seg.png` are the sample `a/b/x`, with extensions `jpg`, `json` and
`seg.png`). Its row holds `__key__`, `__url__` (the tar's volume path) and a
column per extension, typed by the extension's last part: `json` parsed (into
Arrow structs, lists or values), `txt` / `text` as strings, `cls` as an
integer, anything else (images among them) as bytes. Members that are not
regular files, whose names have no extension, or that are hidden (`._x.jpg`)
are not part of any sample.

A tar is one unit of work, fetched whole into the node cache (so a second
epoch reads nothing from the volume) and read there with `tarfile`. Tars are
dealt by bytes; where counts must match (`equalize`), every tar's samples
are counted first (from its headers, once per process) and row ranges of
tars are dealt, as the Parquet reader deals row groups.

The columns come from a fixed sample, the same on every process: the union
of the extensions in the first tars of the listing (the JSON members' types
inferred from their values there), or `schema=` (HF's `features=`) when given.
A member whose extension is not a column is an error that names it.
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from ..io.cache import Cache
from ..errors import EmptyVolumeError, RecordError
from ..manifest import Manifest
from ..planning.rows import RowSlice, unit_of
from ..planning.shares import Planning
from ..io.files import CachedFile, Skipped, read_items
from . import AUTO_EXTENSIONS
from .reader import TableReader
from .row_groups import CountedPart, CountedUnits, localize

if TYPE_CHECKING:
    import pyarrow as pa


log = logging.getLogger("air_core")

KEY, URL = "__key__", "__url__"
IMAGES = frozenset(("jpg", "jpeg", "png", "webp", "ppm", "pgm", "bmp", "tif", "tiff", "gif"))
# A table holds at most this many samples, and closes once its members hold this many bytes.
SAMPLES_PER_TABLE = 1000
TABLE_BYTES = 256 << 20
# Tars fetched ahead of the one being read, in tars and in bytes (one is always allowed, however large).
TARS_AHEAD = 4
TARS_AHEAD_BYTES = 1 << 30
FETCH_THREADS = 4
# The columns come from the first tar of the listing and the next ones, at most this many, while they hold
# fewer bytes than this in all.
SAMPLE_TARS = 4
SAMPLE_BYTES = 64 << 20

_SAMPLES = ("files mode: {path} is read as WebDataset samples, a row per key of each tar; pass mode='files' to "
            "read its tar files as files")
_ADVICE = "pass features= (schema= for Ray) naming every column and its type"


@dataclass(frozen=True)
class Tar:
    """Listing file `file`, a tar of `nbytes` bytes; `num_rows`: its samples, once counted (-1 before)."""

    file: int
    nbytes: int
    num_rows: int = -1


Piece = Tar | RowSlice


def kind(extension: str) -> str:
    """What a member with this extension holds, by its last part: "json", "text", "cls", "image" or "bytes"."""
    last = extension.rsplit(".", 1)[-1].lower()
    if last == "json":
        return "json"
    if last in ("txt", "text"):
        return "text"
    if last == "cls":
        return "cls"
    return "image" if last in IMAGES else "bytes"


@dataclass(frozen=True)
class TarFormat:
    """How members turn into columns of `schema`; `columns`: make only these. Small, it travels with a read task."""

    schema: pa.Schema
    columns: tuple[str, ...] | None = None

    def select(self, columns: Sequence[str] | None) -> TarFormat:
        """This format, making `columns` alone (None: as it is)."""
        return self if columns is None else replace(self, columns=tuple(columns))

    def fields(self) -> list[pa.Field]:
        """The fields it makes, in order."""
        names = self.schema.names if self.columns is None else self.columns
        return [self.schema.field(n) for n in names]


class WebDatasetReader(CountedUnits, TableReader):
    """WebDataset `.tar` shards: a row per sample (`__key__`, `__url__`, a column per member extension).

    Images (`jpg`, `png`, ...) are bytes; `media()` names them, so a door with
    an image type of its own (HF's `datasets.Image()`) gives them that type.

    on_error: "raise" (default): a tar that is not a readable tar fails the
    pass with a `RecordError` naming it, as does a member that does not parse
    as its column's type (JSON, UTF-8 text, an integer `.cls`). "skip": such a
    tar is left out with a warning (counted as holding no samples, so
    `equalize` still gives equal counts), and such a member reads as null
    with a warning, its sample kept. A member whose extension is not among
    the columns is an error either way: its column is missing from the
    features, which `features=` (`schema=`) gives.
    """

    mode = "webdataset"
    label = "WebDataset"
    extensions = AUTO_EXTENSIONS[mode]
    takes = ("schema",)
    refused = dict.fromkeys(("decode", "labels", "include_bytes"), _SAMPLES)

    # -- units ------------------------------------------------------------------------

    def units(self) -> list[Tar]:
        """Every tar of the listing, in order."""
        return self.source.held("webdataset.units", lambda: [Tar(k, int(n)) for k, n in
                                                  enumerate(self.source.manifest.sizes.tolist())])

    def counted(self) -> list[Tar]:
        """Every tar with its samples counted from its headers (an unreadable tar: none, as it reads with
        on_error="skip"): each tar fetched once, through the node cache, by this process."""
        def make() -> list[Tar]:
            m, units = self.source.manifest, self.units()
            counts = []
            for got in _fetch(m, [u.file for u in units], Cache(self.source.cache_dir), self.source.local,
                              on_error="skip"):
                if isinstance(got, Skipped):  # stayed unreadable
                    counts.append(0)
                    continue
                try:
                    with _Shard(got) as shard:
                        counts.append(len(shard.samples))
                except RecordError:  # not a tar
                    counts.append(0)
            return [replace(u, num_rows=n) for u, n in zip(units, counts)]

        return self.source.held("webdataset.counted", make)

    def validate(self) -> None:
        if self.source.options.get("schema") is None:
            self.schema()  # a folder of tars without samples, or a first tar that is not one, fails here

    def pieces(self, files: Sequence[int]) -> list[Piece]:
        units = self.units()
        return [units[k] for k in files]

    # -- columns ----------------------------------------------------------------------

    def schema(self) -> pa.Schema:
        """The given schema, or `__key__`, `__url__` and the sampled extensions, sorted."""
        given = self.source.options.get("schema")
        if given is not None:
            return given
        return self.source.held("webdataset.schema", self._infer)

    def media(self) -> dict[str, str]:
        """The columns of image bytes ("image"), by the extension; none when the schema was given (its types
        stand)."""
        if self.source.options.get("schema") is not None:
            return {}
        return {n: "image" for n in self.schema().names if n not in (KEY, URL) and kind(n) == "image"}

    def _infer(self) -> pa.Schema:
        """The columns of the samples in the first tars of the listing (see `SAMPLE_TARS`, `SAMPLE_BYTES`), or
        of the first tars that hold any."""
        import pyarrow as pa

        m = self.source.manifest
        sizes = m.sizes.tolist()
        picked, held = [], 0
        for k, size in enumerate(sizes[:SAMPLE_TARS]):
            if picked and held + size > SAMPLE_BYTES:
                break
            picked.append(k)
            held += size
        rest = iter(range(len(picked), len(sizes)))
        values: dict[str, list] = {}
        cache = Cache(self.source.cache_dir)
        unreadable: RecordError | None = None
        while picked:
            for got in _fetch(m, picked, cache, self.source.local, on_error="raise"):
                try:
                    shard = _Shard(got)
                except RecordError as e:  # left to the read, where on_error says what to do with it
                    unreadable = unreadable or e
                    continue
                with shard:
                    for _, members in shard.samples:
                        for ext, info in members.items():
                            found = values.setdefault(ext, [])
                            if kind(ext) == "json":
                                found += _sampled_json(shard, info)
            next_tar = next(rest, None)
            picked = [] if values or next_tar is None else [next_tar]  # none yet: the next tar, until one holds some
        if not values:
            if unreadable is not None:
                raise unreadable
            raise EmptyVolumeError(f"{self.source.given} holds tar files but no WebDataset samples (members named "
                                   "<key>.<extension>)")
        fields = [pa.field(KEY, pa.string()), pa.field(URL, pa.string())]
        for ext in sorted(values):
            fields.append(pa.field(ext, _json_type(values[ext], ext, self.source.given) if kind(ext) == "json"
                                   else _default_type(kind(ext))))
        return pa.schema(fields)

    def format(self) -> TarFormat:
        """How this source's members turn into columns (every column)."""
        return TarFormat(self.schema())

    # -- reading ------------------------------------------------------------------------

    def read_pieces(self, pieces: Sequence[Piece], cache: Cache, *, columns: Sequence[str] | None,
                    fetch_threads: int, planning: Planning = Planning(), epoch: int = 0,
                    on_error: str = "raise", skipped: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        for index, _, table in read_tars(self.source.manifest, pieces, cache, self.format().select(columns),
                                  local_root=self.source.local, planning=planning, epoch=epoch,
                                  on_error=on_error, fetch_threads=min(fetch_threads, FETCH_THREADS)):
            yield index, table

    def part(self, pieces: Sequence[Piece], planning: Planning, *, epoch: int) -> WebDatasetPart:
        m = self.source.manifest
        files, local = localize(pieces)
        return WebDatasetPart(m.root, self.source.local, m.fingerprint, m.rows(files), local, self.format(),
                              planning, epoch)


class WebDatasetPart(CountedPart):
    """Tars to read elsewhere: their rows of the listing, the pieces numbered over them, and the columns."""

    def read(self, cache: Cache, *, fetch_threads: int = FETCH_THREADS, prefetch: int = TARS_AHEAD,
             prefetch_bytes: int = TARS_AHEAD_BYTES, on_error: str = "raise",
             columns: Sequence[str] | None = None) -> Iterator[tuple[str, pa.Table]]:
        manifest = Manifest.from_rows(self.root, self.listing, self.fingerprint)
        tables = read_tars(manifest, self.pieces, cache, self.format.select(columns), local_root=self.local_root,
                           planning=self.planning, epoch=self.epoch, on_error=on_error,
                           fetch_threads=min(fetch_threads, FETCH_THREADS), prefetch=min(prefetch, TARS_AHEAD),
                           prefetch_bytes=min(prefetch_bytes, TARS_AHEAD_BYTES))
        return ((path, table) for _, path, table in tables)


def read_tars(manifest: Manifest, pieces: Sequence[Piece], cache: Cache, fmt: TarFormat, *, local_root: str,
              planning: Planning, epoch: int, on_error: str, fetch_threads: int = FETCH_THREADS,
              prefetch: int = TARS_AHEAD,
              prefetch_bytes: int = TARS_AHEAD_BYTES) -> Iterator[tuple[int, str, pa.Table]]:
    """(piece index, volume path, table) per run of samples, in order: each piece's tar's samples (a row range of them, for a
    `RowSlice`), in an order seeded by (the planning's seed, epoch, tar) with its `shuffle`, at most
    `SAMPLES_PER_TABLE` a table."""
    units = [unit_of(p) for p in pieces]
    fields = fmt.fields()
    fetched = _fetch(manifest, [u.file for u in units], cache, local_root, on_error=on_error,
                     fetch_threads=fetch_threads, prefetch=prefetch, prefetch_bytes=prefetch_bytes)
    for index, (piece, got) in enumerate(zip(pieces, fetched)):
        if isinstance(got, Skipped):
            log.warning("skipped %s, which stays unreadable: %s", got.path, got.error)
            continue
        try:
            shard = _Shard(got)
        except RecordError as e:
            if on_error == "raise":
                raise
            log.warning("skipped %s", getattr(e, "what", e))
            continue
        with shard:
            shard.check_columns(fmt.schema.names)
            samples = shard.samples
            lo, hi = (piece.start, min(piece.stop, len(samples))) if isinstance(piece, RowSlice) else (0, len(samples))
            order = np.arange(lo, hi)
            if planning.shuffle and len(order) > 1:
                name = manifest.paths[unit_of(piece).file]
                rng = np.random.default_rng((planning.seed, epoch, zlib.crc32(name.encode())))
                order = rng.permutation(order)
            for batch in _batches(samples, order.tolist(), fields):
                yield index, got.path, _table(shard, [samples[k] for k in batch], fields, on_error)


def _fetch(manifest: Manifest, files: Sequence[int], cache: Cache, local_root: str, *, on_error: str,
           fetch_threads: int = FETCH_THREADS, prefetch: int = TARS_AHEAD,
           prefetch_bytes: int = TARS_AHEAD_BYTES) -> Iterator[CachedFile | Skipped]:
    """The tars `files`, in order, each fetched whole through the node cache, a few ahead."""
    return read_items(manifest, files, cache, fetch_threads=fetch_threads, prefetch=prefetch,
                      prefetch_bytes=prefetch_bytes, local_root=local_root, on_error=on_error)  # type: ignore[arg-type]


Sample = tuple[str, dict[str, tarfile.TarInfo]]


class _Shard:
    """One fetched tar, open: its samples in the order their keys first come, and its members' bytes."""

    def __init__(self, got: CachedFile) -> None:
        self.path = got.path
        self._file = io.BytesIO(got.data) if got.data is not None else open(got.local_path, "rb")
        try:
            self._tar = tarfile.open(fileobj=self._file, mode="r:")
            self.samples = _samples(self._tar.getmembers(), got.size, self.path)
        except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as e:
            self.close()
            raise self.unreadable(e) from None
        except RecordError:
            self.close()
            raise

    def unreadable(self, error: Exception | str) -> RecordError:
        return _unreadable(f"{self.path} is not a readable tar file ({error})")

    def __enter__(self) -> _Shard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def read(self, info: tarfile.TarInfo) -> bytes:
        """A member's bytes."""
        try:
            f = self._tar.extractfile(info)
            assert f is not None  # a regular file
            return f.read()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise self.unreadable(e) from None

    def check_columns(self, names: Sequence[str]) -> None:
        """Refuse a member whose extension is not among `names`, before any of the tar's rows are made."""
        known = set(names)
        for key, members in self.samples:
            for ext in members:
                if ext not in known:
                    raise RecordError(
                        f"{self.path}, sample {key!r}: its member {members[ext].name!r} has the extension {ext!r}, "
                        f"which is not among the columns {list(names)} (found in the first tars of the listing, or "
                        f"given): {_ADVICE}, or leave the tar out with exclude=")


def _samples(members: Sequence[tarfile.TarInfo], size: int, path: str) -> list[Sample]:
    """The regular members of a tar grouped by key (their path up to the first dot of the file name), keys in the
    order they first come; every member's data must lie inside the file's `size` bytes."""
    out: dict[str, dict[str, tarfile.TarInfo]] = {}
    for m in members:
        if not m.isfile():
            continue
        if m.offset_data + m.size > size:
            raise _unreadable(f"{path} is not a readable tar file (it is cut short: its member {m.name!r} runs past "
                              "its end)")
        folder, _, name = m.name.rpartition("/")
        stem, dot, ext = name.partition(".")
        if not stem or not ext:  # hidden, or no extension: no sample's member
            continue
        key = f"{folder}/{stem}" if folder else stem
        sample = out.setdefault(key, {})
        if ext in sample:
            raise _unreadable(f"{path} is not a WebDataset tar: it holds two members for the sample {key!r} with the "
                              f"extension {ext!r} ({sample[ext].name!r} and {m.name!r})")
        sample[ext] = m
    return list(out.items())


def _unreadable(what: str) -> RecordError:
    """The error of a tar that does not read; `what` (its `what`, too) says which and why."""
    error = RecordError(f"{what}: remove or replace it, leave it out with exclude=, or pass on_error='skip' to skip "
                        "such tars with a warning")
    error.what = what  # type: ignore[attr-defined]
    return error


def _batches(samples: Sequence[Sample], order: list[int], fields: Sequence[pa.Field]) -> Iterator[list[int]]:
    """`order` in runs of at most `SAMPLES_PER_TABLE` samples, each closed once its members hold `TABLE_BYTES`."""
    exts = [f.name for f in fields if f.name not in (KEY, URL)]
    run: list[int] = []
    held = 0
    for k in order:
        run.append(k)
        members = samples[k][1]
        held += sum(members[e].size for e in exts if e in members)
        if len(run) >= SAMPLES_PER_TABLE or held >= TABLE_BYTES:
            yield run
            run, held = [], 0
    if run:
        yield run


def _table(shard: _Shard, samples: Sequence[Sample], fields: Sequence[pa.Field], on_error: str) -> pa.Table:
    """The rows of `samples` of `shard`, as `fields`."""
    import pyarrow as pa

    arrays = []
    for field in fields:
        if field.name == KEY:
            arrays.append(pa.array([key for key, _ in samples], field.type))
            continue
        if field.name == URL:
            arrays.append(pa.array([shard.path] * len(samples), field.type))
            continue
        decode = _decoder(field.name, field.type)
        values = []
        for key, members in samples:
            info = members.get(field.name)
            values.append(None if info is None else _decoded(decode, shard, key, info, on_error))
        arrays.append(_array(values, field, shard, samples, on_error))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _decoded(decode: Callable[[bytes, str], Any], shard: _Shard, key: str, info: tarfile.TarInfo,
             on_error: str) -> Any:
    try:
        return decode(shard.read(info), f"{shard.path}/{info.name}")
    except ValueError as e:  # bad JSON, text that is not UTF-8, a class that is not an integer
        return _malformed(shard, key, info, f"{type(e).__name__}: {e}", on_error)


def _array(values: list, field: pa.Field, shard: _Shard, samples: Sequence[Sample], on_error: str) -> pa.Array:
    """`values` as `field`'s type; a value that does not fit raises naming its sample, or (skip) is null."""
    import pyarrow as pa

    try:
        return pa.array(values, field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    fitted = []
    for (key, members), value in zip(samples, values):
        try:
            pa.array([value], field.type)
            fitted.append(value)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            why = f"its value does not fit the column's type {field.type} ({e})"
            fitted.append(_malformed(shard, key, members[field.name], why, on_error))
    return pa.array(fitted, field.type)


def _malformed(shard: _Shard, key: str, info: tarfile.TarInfo, why: str, on_error: str) -> None:
    where = f"{shard.path}, sample {key!r}, member {info.name!r}: {why}"
    if on_error == "raise":
        raise RecordError(f"{where}; fix or remove the member, {_ADVICE} with the type it has, or pass "
                          "on_error='skip' to read such members as null with a warning")
    log.warning("reading a malformed member as null: %s", where)
    return None


def _decoder(ext: str, type: pa.DataType) -> Callable[[bytes, str], Any]:
    """How a member's bytes (and its path, `<tar>/<member>`) become a value of `type`: an image struct (HF's
    `Image()` storage) gets both; a `.json` member (first), or a type that is neither text, bytes nor an integer, is
    parsed as JSON."""
    import pyarrow as pa

    if kind(ext) == "json":
        return lambda data, path: _json(data, type)
    if _is_media(type):
        return lambda data, path: {"bytes": data, "path": path}
    if pa.types.is_string(type) or pa.types.is_large_string(type):
        return lambda data, path: data.decode("utf-8")
    if pa.types.is_binary(type) or pa.types.is_large_binary(type) or pa.types.is_fixed_size_binary(type):
        return lambda data, path: data
    if pa.types.is_integer(type):
        return lambda data, path: int(data.decode("utf-8").strip())
    return lambda data, path: _json(data, type)


def _json(data: bytes, type: pa.DataType) -> Any:
    """A JSON member's value; an object with a field its struct type lacks is refused (it would be dropped)."""
    import pyarrow as pa

    value = json.loads(data)
    if pa.types.is_struct(type) and isinstance(value, dict):
        names = {type.field(i).name for i in range(type.num_fields)}
        extra = [k for k in value if k not in names]
        if extra:
            raise ValueError(f"field {extra[0]!r} is not among the fields of its type {type}")
    return value


def _is_media(type: pa.DataType) -> bool:
    """Whether `type` is struct<bytes, path>, as HF stores an `Image()`."""
    import pyarrow as pa

    return pa.types.is_struct(type) and sorted(type.field(i).name for i in range(type.num_fields)) == ["bytes", "path"]


def _sampled_json(shard: _Shard, info: tarfile.TarInfo) -> list:
    """A sampled JSON member's value, in a list; none for one that is not valid JSON (the read reports it)."""
    try:
        return [json.loads(shard.read(info))]
    except ValueError:
        return []


def _json_type(values: list, ext: str, given: str) -> pa.DataType:
    import pyarrow as pa

    try:
        return pa.array(values).type
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
        raise RecordError(f"the .{ext} members at the start of {given} hold JSON values of no one type ({e}): "
                          f"{_ADVICE}") from None


def _default_type(what: str) -> pa.DataType:
    """The column type of members of this `kind` but JSON: text a string, a class an integer, else bytes."""
    import pyarrow as pa

    return {"text": pa.string(), "cls": pa.int64()}.get(what, pa.binary())


__all__ = ["IMAGES", "KEY", "Tar", "TarFormat", "URL", "WebDatasetPart", "WebDatasetReader", "kind", "read_tars"]
