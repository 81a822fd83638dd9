"""The `uc-volume` builder: a Unity Catalog volume folder as a Hugging Face dataset.

The builder lists the volume itself, through the core, when it is made (the
listing's fingerprint joins the config id, so the Arrow cache of a
non-streaming load is rebuilt when files change). What to read is resolved by
`air_core.resolve_source`, as every front door does; its `Source` carries the
listing to DataLoader workers as a file in the node cache folder. The
source's reader says which options apply, cuts each split into the
reader's pieces (files, or row groups and row ranges), deals them into
shards, and reads them through the core's node cache and fetch pool, ahead
of the consumer. This module adds what is HF's: features, shards in
`gen_kwargs`, and a file's row (`decode=`, `labels=`). A mixture's shards
are slots of whichever epoch `datasets` iterates (`air_hf.examples`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import islice
from typing import Any, Iterator, Union

import datasets
import pyarrow as pa

from air_core.doors import EQUALIZES, MODES, ON_ERRORS, Cache, MixedSource, MixedTable, OptionError, Planning, Source, TableReader, check_columns, default_fetch_threads, detect_rank, freeze_inherited, resolve_mixture, resolve_source, volume, without_skips
from air_core.doors import options as check
from air_core.planning.rows import RowGroup, RowSlice, unit_of

from . import media, rows
from .examples import EPOCH, Tables
from .shards import check_drop, shard_count
from .split_layout import by_split

FILES_PER_TABLE = 64


@dataclass
class UCVolumeConfig(datasets.BuilderConfig):
    """Options of `load_dataset("uc-volume", ...)`.

    Attributes:
        data_dir: the volume folder to read, `/Volumes/<catalog>/<schema>/<volume>/<folder>`
            (or `dbfs:/Volumes/...`); with `delta_table`, where the table is exported. Without
            it, `delta_table` is read in place, from its own files, where that is exact (no
            deletion vectors, column mapping or partition columns; otherwise an error says so).
        include: glob(s) of files to keep, relative to `data_dir` (`*` crosses `/`).
        exclude: glob(s) of files to leave out.
        file_extensions: keep only files with these extensions (case-insensitive), as in Ray's readers.
        mode: "files" (a row per file), "parquet" (the tables' rows; row groups are the
            units), "json" (JSON Lines: a row per object; a `.json` file: a row per object of
            its top-level array, read by ranges), "csv" (a row per record),
            "text" (a row per line, paragraph or file, in `text`), or "auto": a format's
            when every file has its extensions (`.parquet`; `.jsonl`, `.ndjson`; `.csv`,
            `.tsv`; the line formats also as `.gz`, `.zst`), "files" when none has.
            A pack (`air-data pack`) reads as its files in "auto", "files" and "pack" modes.
            Large uncompressed line files are cut into spans, each owning the records that
            start in it, so one file is shared by every rank and worker. "webdataset"
            (`.tar` shards, also under "auto"): a row per sample, `__key__`, `__url__` and a
            column per member extension, images as `datasets.Image()`.
        decode: files mode: the column added to path/local_path/size: "path" (none),
            "bytes", "text" (UTF-8), "image" (`datasets.Image()`) or "audio" (`datasets.Audio()`).
        labels: files mode: add a `label` ClassLabel from each file's parent folder.
        shuffle: shuffle the read order, seeded (epochs after the first are reshuffled by
            `datasets` itself through `set_epoch`, or by `.shuffle(seed=...)`).
        seed: the shuffle seed.
        equalize: "none", "pad" (repeat items) or "drop" (leave some out) so that every
            shard, hence every rank and worker, has exactly the same number of examples.
        world_size: ranks the shards are split over; detected (torch.distributed, then
            torchrun's environment) when not given.
        num_workers: DataLoader workers per rank; the shard count is world_size x num_workers.
            Without it each rank gets up to 12 shards (even for 1, 2, 3, 4, 6 or 12 workers)
            of at least 4 files or row groups each.
        node_cache_dir: the node-local file cache (default `$AIR_CACHE_DIR`, then
            `/local_disk0`, then a per-user temp folder). Not `cache_dir`: that one is
            `load_dataset`'s own, for the Arrow cache.
        node_cache_limit: cap on the node cache's bytes, recorded in the cache for every process
            on the node; None: keep to the cap last recorded there, if any.
        verify: check each cached copy's bytes against their checksum on every hit, not only
            its length, and fetch again one that differs (see `air_core.FileStream`).
        fetch_threads: concurrent reads from the volume per DataLoader worker (default:
            32 when there are several workers, else 64).
        delta_table: a Delta table to export to `data_dir` as Parquet and stream (an export
            of the same version is reused). To export through Spark, call
            `air_core.export_delta(table, data_dir, spark=spark)` first and load `data_dir`:
            a SparkSession cannot travel inside a dataset's config.
        delta_version: the table version to export (default: the latest).
        columns: a table's modes: the columns to read, as `load_dataset("parquet", columns=...)`;
            the others are never decoded.
        on_error: files mode: "raise" (default): a file that stays unreadable through every
            retry fails the pass, naming it; "skip": it is left out with a warning (with
            `equalize`, another row of its shard stands in, so counts stay equal). JSON Lines,
            CSV and text: "skip" leaves out a malformed record with a warning naming it.
        delimiter: CSV mode: the field delimiter (default: a tab for `.tsv`, else a comma).
        sample_by: text mode: "line" (default), "paragraph" or "document" (a row per file).
        media: records that name media files (JSON Lines, `.json` arrays of objects as LLaVA's,
            CSV or Parquet records; the folder's other files are the media): their columns that
            hold paths (one, or a list) -> each one's kind, "image", "audio", "video"
            (`datasets.Image()`, `Audio()`, `Video()`, read from the medium's copy in the node
            cache, fetched ahead of the consumer) or "file" (the copy's local path). Under mode
            "auto" a folder in HF's own layout (`metadata.jsonl`, `.csv` or `.parquet` beside the
            media, `file_name` columns) is read so without it, each column named as `imagefolder`
            names it. `features=` may name them: a media feature there is read from the records'
            paths, a `Value("string")` keeps the copy's path. With `on_error="skip"`, a record
            naming a missing medium (or an image that does not open) is left out with a warning;
            else it is a `MediaError` naming the record and the path.
        media_dir: the folder the media paths are relative to: a volume path, or a path relative
            to `data_dir` (such as "images"); default: each records file's own folder.
        sources: instead of `data_dir`, a mixture of volume folders: a list of dicts, each
            with a folder's `path`, optionally its `include`, `exclude`, `file_extensions` and
            `mode` (default "auto") or a Delta table's `delta_table` and `delta_version`
            (exported to `path`), and one weight, the same kind for every source:
            `proportion`, `repeat` or `choose`. Folders of loose files mix as files (see
            `air_core.FileStream`), tables of one schema as rows (see `air_core.RowStream`).
            The split `train` holds the mixture's epochs: `ds.set_epoch(e)` (on the dataset
            iterated, after `split_dataset_by_node` too, as `transformers.Trainer` calls it)
            reads epoch e, each source's share exactly, dealt into equal shards (a non-streaming
            load holds epoch 0). Not with `labels=` so far.
        epoch_size: a mixture of proportions: its items, files or rows (default: the sources' added up).

    `load_dataset(..., features=...)` reads a table's rows into those features
    (JSON Lines, CSV: parsed as them; Parquet: cast); without it they are
    inferred from the files (JSON Lines, CSV: from the records at the start of
    the listing, the same on every rank and worker).
    """

    include: Union[str, list, None] = None
    exclude: Union[str, list, None] = None
    file_extensions: Union[list, None] = None
    mode: str = "auto"
    decode: str = "path"
    labels: bool = False
    shuffle: bool = False
    seed: int = 0
    equalize: str = "none"
    world_size: Union[int, None] = None
    num_workers: Union[int, None] = None
    node_cache_dir: Union[str, None] = None
    node_cache_limit: Union[int, None] = None
    verify: bool = False
    fetch_threads: Union[int, None] = None
    delta_table: Union[str, None] = None
    delta_version: Union[int, None] = None
    columns: Union[list, None] = None
    on_error: str = "raise"
    delimiter: Union[str, None] = None
    sample_by: Union[str, None] = None
    media: Union[dict, None] = None
    media_dir: Union[str, None] = None
    sources: Union[list, None] = None
    epoch_size: Union[int, None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sources is not None:
            beside = [n for n in ("data_dir", "delta_table", "include", "exclude", "file_extensions")
                      if getattr(self, n)]
            if beside:
                raise OptionError(f"sources= names each folder and its selection: give {beside[0]}= in each "
                                  "source's dict, not beside sources=")
            if self.labels:
                raise OptionError("labels=True is not read over a mixture (sources=) so far: load each source "
                                  "with its labels, or leave labels unset")
        elif self.epoch_size is not None:
            raise OptionError("epoch_size= sizes a mixture: give sources=[...], or leave it unset")
        if not self.data_dir and not self.delta_table and self.sources is None:
            raise OptionError(
                "uc-volume needs data_dir=, the volume folder to read: "
                "load_dataset('uc-volume', data_dir='/Volumes/<catalog>/<schema>/<volume>/<folder>'), "
                "or delta_table= to read a Delta table, or sources=[...] to read a mixture"
            )
        if self.data_dir:
            volume.parse(self.data_dir)
        for name, value, choices in (("mode", self.mode, MODES), ("decode", self.decode, rows.DECODES),
                                     ("equalize", self.equalize, EQUALIZES), ("on_error", self.on_error, ON_ERRORS)):
            check.choice(name, value, choices)
        check.flag("labels", self.labels)
        check.flag("shuffle", self.shuffle)
        check.flag("verify", self.verify)
        check.whole("seed", self.seed, low=0)
        for name in ("world_size", "num_workers", "fetch_threads"):
            check.whole(name, getattr(self, name), low=1, optional=True)
        check.whole("node_cache_limit", self.node_cache_limit, low=0, optional=True)

    @property
    def planning(self) -> Planning:
        """How the shards are dealt and ordered, from the checked options."""
        return Planning(self.seed, self.shuffle, equalize=self.equalize)


def _resolve(config: UCVolumeConfig, features: datasets.Features | None) -> Source | MixedSource | MixedTable:
    if config.sources is not None:
        return resolve_mixture(config.sources, mode=config.mode, epoch_size=config.epoch_size,
                               cache_dir=config.node_cache_dir,
                               rows_here="load_dataset('uc-volume', sources=[...]) in mode 'auto' (the default)")
    return resolve_source(config.data_dir, mode=config.mode, include=config.include, exclude=config.exclude,
                          file_extensions=config.file_extensions, delta_table=config.delta_table,
                          delta_version=config.delta_version, cache_dir=config.node_cache_dir,
                          schema=None if features is None else features.arrow_schema,
                          delimiter=config.delimiter, sample_by=config.sample_by, media=config.media,
                          media_dir=config.media_dir)


def _features(config: UCVolumeConfig, source: Source | MixedSource | MixedTable) -> datasets.Features:
    """The rows' features; options that do not fit the source's format are refused here, at setup."""
    reader = source.reader
    reader.check(decode=config.decode, labels=config.labels, on_error=config.on_error, columns=config.columns)
    if isinstance(source, MixedSource):
        for one in source.sources:
            rows.check_media(one.manifest, config.decode)
        return rows.features(config.decode, None)
    if isinstance(reader, TableReader):
        schema = reader.schema()
        if config.columns is not None:
            check_columns(config.columns, schema.names)
            schema = pa.schema([schema.field(c) for c in config.columns])
        return media.features(datasets.Features.from_arrow_schema(schema), reader.media())
    manifest = source.manifest
    rows.check_media(manifest, config.decode)
    return rows.features(config.decode, rows.label_names(manifest) if config.labels else None)


_OPTIONS = frozenset(f.name for f in dataclasses.fields(UCVolumeConfig))
_PUBLIC = _OPTIONS - {"name", "version", "data_files", "description"}


class UCVolume(datasets.ArrowBasedBuilder):
    """Streams a volume folder: a row per file, or the rows of a table (Parquet, JSON Lines, CSV, text)."""

    BUILDER_CONFIG_CLASS = UCVolumeConfig
    config: UCVolumeConfig
    _embed_media = False
    _dealt: tuple[int, list] | None = None

    def _create_builder_config(self, config_name=None, custom_features=None, **config_kwargs):
        # datasets resolves a config's data here; this builder resolves its listing, whose
        # fingerprint joins the config id so that a changed folder gets a fresh Arrow cache.
        check.reject_unknown(set(config_kwargs) - _OPTIONS - {"config_id"}, _PUBLIC, what="uc-volume")
        config, config_id = super()._create_builder_config(config_name, custom_features, **config_kwargs)
        self._source = _resolve(config, custom_features)
        self._features = _features(config, self._source)
        return config, f"{config_id}-{self._source.fingerprint[:16]}"

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(features=self._features)

    def _split_generators(self, dl_manager) -> list[datasets.SplitGenerator]:
        c, reader = self.config, self._source.reader
        if c.columns is not None and list(self.info.features) != list(c.columns):
            # datasets puts the user's features= over `_info`'s: the rows hold the chosen columns alone, and so do
            # the features, each as given (HF's parquet builder settles columns= beside features= the same way).
            self.info.features = datasets.Features({name: self.info.features[name] for name in c.columns})
        world_size = c.world_size or detect_rank()[1]
        if isinstance(self._source, (MixedSource, MixedTable)):
            pieces = reader.epoch_pieces(c.planning, epoch=0)  # every epoch holds as many items
            n = shard_count(len(pieces), world_size=world_size, num_workers=c.num_workers)
            if c.equalize == "drop":
                check_drop(reader.count(pieces), reader.counts, n)
            # A mixture's shards are slots: slot j reads part j of the epoch datasets iterates (air_hf.examples),
            # so every epoch is read whole, whichever rank and worker each slot goes to.
            return [datasets.SplitGenerator(name="train", gen_kwargs={"shards": list(range(n)), "parts": n, EPOCH: 0})]
        listed = by_split(self._source.manifest.paths)
        generators = []
        for split, files in listed.items():
            pieces = reader.pieces(files)
            n = shard_count(len(pieces), world_size=world_size, num_workers=c.num_workers)
            if c.equalize == "drop":
                check_drop(reader.count(pieces), reader.counts, n)
            shards = reader.deal(pieces, n, c.planning)
            # A list in gen_kwargs is what datasets shards over: one element per shard.
            generators.append(datasets.SplitGenerator(name=split, gen_kwargs={"shards": shards}))
        return generators

    def _get_examples_iterable_for_split(self, split_generator):
        return Tables.of(super()._get_examples_iterable_for_split(split_generator), self.info.features,
                         self._generate_rows)

    def _prepare_split(self, split_generator, **kwargs):
        # A non-streaming load writes the rows into datasets' Arrow cache, which outlives the
        # node cache: image and audio rows then carry their bytes, not the path of a copy that
        # a prune may remove.
        self._embed_media = True
        return super()._prepare_split(split_generator, **kwargs)

    def __getstate__(self) -> dict:
        # The builder travels to DataLoader workers inside the dataset: not with an epoch's items.
        return {k: v for k, v in super().__getstate__().items() if k != "_dealt"}

    def _epoch_parts(self, epoch: int, parts: int) -> list[list]:
        """A mixture's `epoch` dealt into `parts` shards (the last epoch's kept: a worker reads several)."""
        if self._dealt is None or self._dealt[0] != epoch:
            c, reader = self.config, self._source.reader
            self._dealt = epoch, reader.deal(reader.epoch_pieces(c.planning, epoch=epoch), parts, c.planning)
        return self._dealt[1]

    def _shard_pieces(self, shards: list, parts: int | None, epoch: int) -> tuple[list, Cache, int]:
        """The pieces of `shards` as they are read, the node cache and the fetch threads."""
        freeze_inherited()
        c, reader = self.config, self._source.reader
        if parts is not None:  # a mixture: `shards` are slots of the epoch being iterated
            dealt = self._epoch_parts(epoch, parts)
            shards = [dealt[j] for j in shards]
        cache = Cache(c.node_cache_dir, limit_bytes=c.node_cache_limit, verify=c.verify)
        threads = c.fetch_threads or default_fetch_threads()
        pieces = [piece for shard in shards for piece in shard]
        if isinstance(reader, TableReader):
            pieces = reader.stream_pieces(pieces, c.planning, epoch=epoch)
        return pieces, cache, threads

    def _generate_tables(self, shards: list, parts: int | None = None, epoch: int = 0,
                         start: tuple[int, int] = (0, 0)) -> Iterator[tuple[int, pa.Table]]:
        """The shards' rows as tables, each keyed by its piece's place among the shards' pieces (a row per file:
        0, the files being one run that starts at any row), from `start`: (pieces done, rows of the next read),
        none of the pieces done read."""
        c, reader = self.config, self._source.reader
        pieces, cache, threads = self._shard_pieces(shards, parts, epoch)
        if isinstance(reader, TableReader):
            names, kinds = list(self._features), media.featured(self.info.features, reader.media())
            at, left, drop = _left(pieces, start, in_order=reader.rows_as_stored or not c.shuffle)
            tables = reader.read_pieces(left, cache, columns=c.columns, fetch_threads=threads, planning=c.planning,
                                        epoch=epoch, on_error=c.on_error)
            for k, table in _past_rows(tables, drop):
                yield at + k, media.table(table.select(names), kinds, embed=self._embed_media)
            return
        features = self._features
        schema = features.arrow_schema
        items = reader.files_of(pieces, c.planning)
        # The files left start at the row, unless a file left out (on_error="skip", without equalize's stand-in)
        # may have made the rows fewer than the files: then they are read from the start and dropped.
        seek = start[1] if c.on_error == "raise" or c.equalize != "none" else 0
        files = islice(without_skips(reader.read_files(items[seek:], cache, fetch_threads=threads,
                                                       on_error=c.on_error), keep_count=c.equalize != "none"),
                       start[1] - seek, None)
        manifest = None if isinstance(self._source, MixedSource) else self._source.manifest  # for labels
        for batch in iter(lambda: list(islice(files, FILES_PER_TABLE)), []):
            yield 0, rows.table(batch, manifest, features, schema, c.decode, embed_media=self._embed_media)

    def _generate_rows(self, shards: list, parts: int | None = None, epoch: int = 0,
                       start: tuple[int, int] = (0, 0)) -> Iterator[tuple[int, list[dict]]]:
        """The rows of `_generate_tables`, as `datasets`' PythonFormatter gives them, in lists: a table's rows from
        its reader's `read_rows` (JSON Lines makes them without a table), a row per file its table converted. Only
        for features that need no decoding (`Tables`): so no media column."""
        c, reader = self.config, self._source.reader
        if not isinstance(reader, TableReader):
            for k, table in self._generate_tables(shards, parts, epoch, start):
                yield k, table.to_pylist()
            return
        pieces, cache, threads = self._shard_pieces(shards, parts, epoch)
        names = list(self._features)
        at, left, drop = _left(pieces, start, in_order=reader.rows_as_stored or not c.shuffle)
        runs = reader.read_rows(left, cache, columns=c.columns, fetch_threads=threads, planning=c.planning,
                                epoch=epoch, on_error=c.on_error)
        for k, got in _past_rows(runs, drop):
            if got and list(got[0]) != names:  # a reader's own column order (Parquet's partition columns last)
                got = [{n: row[n] for n in names} for row in got]
            yield at + k, got


def _left(pieces: list, start: tuple[int, int], *, in_order: bool) -> tuple[int, list, int]:
    """Where to read on from `start` (pieces done, rows of the next read): the place of the first piece left among
    `pieces`, the pieces left, and how many rows of the first of them to read and drop. A piece that is a range of
    rows read in their order (`in_order`: a reader's `rows_as_stored`, or any reader's unshuffled) is cut to its rows from there
    instead (Parquet reads its row group, then a slice of it), or left out where none is left."""
    done, rows = start
    left = pieces[done:]
    if not rows or not left or not in_order or not isinstance(left[0], (RowGroup, RowSlice)):
        return done, left, rows
    first = left[0]
    lo, hi = (first.start, first.stop) if isinstance(first, RowSlice) else (0, first.num_rows)
    if lo + rows >= hi:
        return done + 1, left[1:], 0
    return done, [RowSlice(unit_of(first), lo + rows, hi), *left[1:]], 0


def _past_rows(runs: Iterator[tuple[int, Any]], rows: int) -> Iterator[tuple[int, Any]]:
    """`runs` (position among the pieces, table or list of rows) without the first `rows` rows of piece 0."""
    for k, run in runs:
        if rows and k == 0:
            n = min(rows, len(run))
            run, rows = run[n:], rows - n
            if not len(run):
                continue
        yield k, run
