"""UCVolumeDatasource: a Unity Catalog volume folder as a Ray Dataset.

The driver resolves the folder once (in `__init__`, rank 0 listing and
broadcasting when torch.distributed is up); the source's reader gives this
rank's share, and its pieces are dealt into byte-balanced read tasks. Each
task carries only its own `Part` (its rows of the listing) and reads
through the cache of the node it runs on, so a second execution reads
nothing from the volume. Rows are a file's (loose files, a pack's files:
`path`, `local_path`, `size`, `bytes`) or a table's (Parquet, hive
partition columns kept); the datasource never asks which format it has.

On a cluster of several nodes, `read_uc_volume` gives each node its own read
operator over a fixed part of the data (see `placement`), so every node reads
the same files every execution and its cache keeps serving them.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import random
import warnings
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import pyarrow as pa
import ray
from ray.data import Dataset, FileShuffleConfig
from ray.data.block import BlockMetadata
from ray.data.context import DataContext
from ray.data.datasource import Datasource, ReadTask
from ray.util.annotations import RayDeprecationWarning
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from air_core.doors import DEFAULT_FETCH_THREADS, EQUALIZES, ON_ERRORS, Equalize, Grid, MixedSource, MixedTable, Mode, OnError, OptionError, Planning, Source, TableReader, check_columns, default_dir, detect_rank, entry_path_length, resolve_mixture, resolve_source
from air_core.doors import options as check

from air_core.read.media import MediaReader, contents_schema

from . import owners as owners_mod
from . import placement, task_plan
from .task_read import TaskSource, bytes_type, files_read_fn, files_schema, table_read_fn

Shuffle = Literal["files"] | FileShuffleConfig | None
DEFAULT_BLOCK_BYTES = 128 << 20
# Arrow bytes of a files-mode row besides its strings' characters: offsets and the size.
_ROW_BYTES = 24


class UCVolumeDatasource(Datasource):
    """The files, or the Parquet tables, under a Unity Catalog volume folder.

    Use with `ray.data.read_datasource(UCVolumeDatasource(path, ...))`, or
    call `read_uc_volume(path, ...)`, which also picks a number of blocks
    suited to fetch-bound reads and, on a cluster of several nodes, reads
    each node's part (`by_node`) on that node. Either way, on several nodes
    each part is read on the node that owns its bucket, so node caches keep
    serving later executions: a task that Ray runs elsewhere (one read
    operator places all its tasks alike) has the owner's `NodeReader` read
    it and passes its blocks on (see `air_ray.owners`).

    Files mode gives one row per file: `path` (the volume path), `local_path`
    (the copy in the cache of the node that ran the read task), `size`, and
    `bytes` (the contents: by default only when the Ray cluster has several
    nodes, where a row may be consumed on another node than the one that read
    it). `air_ray.local_path(row)` gives a path to the file that is valid on
    whichever node calls it. Parquet mode gives the tables' rows with hive
    partition columns (`split=train/`) kept as string columns; it is chosen
    automatically when every file is `.parquet`.
    A pack made by `air_core.pack` reads as the files it holds (files-mode
    rows, `local_path` empty), row group by row group.

    Args:
        path: a volume folder, `/Volumes/<catalog>/<schema>/<volume>/...` or `dbfs:/Volumes/...`.
        mode: "auto" (a format's when every file has its extensions:
            `.parquet`; `.jsonl`, `.ndjson`; `.csv`, `.tsv`, the line formats
            also as `.gz`, `.zst`; files when none has; an error for a mix),
            "files", "parquet", "json" (JSON Lines; a `.json` file: the
            objects of its top-level array), "csv" or "text" (a row
            per line in `text`). Large uncompressed line files are cut into
            spans, each owning the records that start in it. "webdataset"
            (`.tar` shards, also under "auto"): a row per sample, `__key__`,
            `__url__` and a column per member extension (images as bytes).
        include: glob(s) of files to keep, relative to `path` (`*` crosses `/`).
        exclude: glob(s) of files to leave out.
        file_extensions: keep only files with these extensions (case-insensitive), as in Ray's readers.
        include_paths: add the `path` column (default: True in files mode, False in Parquet mode).
        include_bytes: files mode: add each file's contents as a `bytes` column;
            records that name media: each media column holds its files'
            bytes, not the local paths of their copies (default: when the
            running Ray cluster has more than one node, where a row may be
            consumed on another node than the one that read it).
        shuffle: "files" (a new file order every execution) or a
            `ray.data.FileShuffleConfig` (seeded); None keeps the listing order.
            Which rank reads a file never changes, so each node's cache keeps its share.
        rank, world_size: read only this rank's share, for one driver per
            rank (torchrun); detected from torch.distributed or `RANK` /
            `WORLD_SIZE` when not given. Inside Ray Train keep (0, 1) and let
            `get_dataset_shard` split the stream.
        equalize: "none", "drop" (every rank gets the smallest share's count)
            or "pad" (every rank gets the largest, repeating rows): equal
            counts keep DDP ranks in lockstep. Counts are rows: files in files
            mode, table rows (exact, cut inside row groups) in Parquet mode.
        cache_dir: the node cache folder on every node (default: each node's
            own `air_core.default_dir()`, resolved where the read task runs).
        cache_limit: cap on the node cache's bytes, recorded in the cache for every process on the node;
            None: keep to the cap last recorded there, if any.
        verify: check each cached copy's bytes against their checksum on
            every hit, not only its length, and fetch again one that differs
            (see `air_core.FileStream`).
        fetch_threads: each read task's reads in flight (default 64).
        prefetch, prefetch_bytes: how far a task fetches ahead of the rows it
            has built, in files and bytes (default: the core's).
        on_error: files mode: "raise" (default): a file that stays unreadable
            through every retry fails its task, naming it; "skip": it is left
            out with a warning (with `equalize`, another row of its task stands
            in, so counts stay equal).
        delta_table, delta_version, spark: export this Delta table (at this
            version; through this Spark session when given) to `path` as
            Parquet first, then read that export; an export of the same
            version is reused. Without `path`, the table is read in place,
            from its own files, where that is exact (no deletion vectors,
            column mapping or partition columns; otherwise an error says so).
        schema: a table's modes: read the rows into this `pyarrow.Schema`
            (JSON Lines, CSV: parsed as it; Parquet: cast); default: inferred
            from the files (JSON Lines, CSV: from the records at the start of
            the listing).
        delimiter: CSV mode: the field delimiter (default: a tab for `.tsv`, else a comma).
        sample_by: text mode: "line" (default), "paragraph" or "document" (a row per file).
        media: records that name media files (JSON Lines, `.json` arrays
            of objects, CSV or Parquet records; the folder's other files are
            the media): their columns that hold paths (one, or a list) -> each
            one's kind ("image", "audio", "video", "file"). Each such column
            of a row holds the local path of its medium's copy in the cache of
            the node that ran the read task (a list, for a list of paths), or
            with `include_bytes` its bytes, fetched ahead of the rows. Under
            mode "auto" a folder in HF's layout (`metadata.jsonl`, `.csv` or
            `.parquet` beside the media, `file_name` columns) is read so
            without it. With `on_error="skip"`, a record naming a missing
            medium (or an image that does not open) is left out with a
            warning; else it is a `MediaError` naming the record and the path.
        media_dir: the folder the media paths are relative to: a volume path,
            or a path relative to `path` (default: each records file's own folder).
        sources: instead of `path`, a mixture of volume folders: a list of
            dicts, each with a folder's `path`, optionally its `include`,
            `exclude`, `file_extensions` and `mode` (default "auto") or a
            Delta table's `delta_table` and `delta_version` (exported to
            `path`), and one weight, the same kind for every source: `proportion`, `repeat` or
            `choose`. Folders of loose files mix as files (see
            `air_core.FileStream`), tables of one schema as rows (see
            `air_core.RowStream`); `mode="files"` reads every source as files.
            Each execution is an epoch of the mixture (the next one with
            `shuffle="files"` or a reseeding `FileShuffleConfig`; epoch 0
            otherwise), each source's share exactly; an item (a file, a row
            group or span) is read on the same node in every execution that
            holds it.
        epoch_size: a mixture of proportions: its items per epoch (default:
            the sources' sizes added up).

    Raises:
        VolumePathError, EmptyVolumeError, OptionError, ParquetError: on the
            driver, when the datasource is made.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        mode: Mode = "auto",
        include: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
        file_extensions: Sequence[str] | None = None,
        include_paths: bool | None = None,
        include_bytes: bool | None = None,
        shuffle: Shuffle = None,
        rank: int | None = None,
        world_size: int | None = None,
        equalize: Equalize = "none",
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        verify: bool = False,
        fetch_threads: int = DEFAULT_FETCH_THREADS,
        prefetch: int | None = None,
        prefetch_bytes: int | None = None,
        on_error: OnError = "raise",
        delta_table: str | None = None,
        delta_version: int | None = None,
        spark: Any = None,
        schema: pa.Schema | None = None,
        delimiter: str | None = None,
        sample_by: str | None = None,
        media: Mapping[str, str] | None = None,
        media_dir: str | None = None,
        sources: Sequence[Mapping[str, Any]] | None = None,
        epoch_size: int | None = None,
        **unknown: Any,
    ) -> None:
        super().__init__()
        self._projection_map = None  # Ray's projection pushdown (Parquet mode) sets it on a copy
        check.reject_unknown(unknown, datasource_options(), what="UCVolumeDatasource")
        check.choice("equalize", equalize, EQUALIZES)
        check.choice("on_error", on_error, ON_ERRORS)
        check.flag("verify", verify)
        fetch = {k: v for k, v in (("fetch_threads", fetch_threads), ("prefetch", prefetch),
                                   ("prefetch_bytes", prefetch_bytes)) if v is not None}
        for name, value in fetch.items():
            check.whole(name, value, low=1)
        check.whole("cache_limit", cache_limit, low=0, optional=True)
        seed, self._reseed = _shuffle_seed(shuffle)
        self._rank, self._world_size = detect_rank(rank, world_size)
        Grid(self._rank, self._world_size)
        self._planning = Planning(seed or 0, seed is not None, equalize=equalize)
        self._source: Source | MixedSource | MixedTable
        if sources is None:
            if epoch_size is not None:
                raise OptionError("epoch_size= sizes a mixture: give sources=[...], or leave it unset")
            self._source = resolve_source(path, mode=mode, include=include, exclude=exclude,
                                          file_extensions=file_extensions, delta_table=delta_table,
                                          delta_version=delta_version, spark=spark, cache_dir=cache_dir,
                                          schema=schema, delimiter=delimiter, sample_by=sample_by, media=media,
                                          media_dir=media_dir)
        else:
            beside = [n for n, v in (("path", path), ("include", include), ("exclude", exclude),
                                     ("file_extensions", file_extensions), ("delta_table", delta_table),
                                     ("schema", schema), ("delimiter", delimiter), ("sample_by", sample_by),
                                     ("media", media), ("media_dir", media_dir))
                      if v is not None]
            if beside:
                raise OptionError(f"sources= is a mixture of folders, each named with its selection in its dict: "
                                  f"give {beside[0]}= there, not beside it")
            self._source = resolve_mixture(sources, mode=mode, epoch_size=epoch_size, cache_dir=cache_dir,
                                           rows_here="read_uc_volume(sources=[...]) in mode 'auto' (the default)")
        reader = self._source.reader
        reader.check(on_error=on_error, include_bytes=include_bytes)
        self._tables = isinstance(reader, TableReader)
        fetch["on_error"] = on_error
        self._include_paths = (not self._tables) if include_paths is None else bool(include_paths)
        self._want_bytes = None if include_bytes is None else bool(include_bytes)
        self._tasks = TaskSource(cache_dir=cache_dir and os.path.abspath(cache_dir), cache_limit=cache_limit,
                                 verify=verify, fetch=fetch)
        self._placed: np.ndarray | None = None  # by bucket: whether this copy reads it (see `by_node`)
        self._node: str | None = None  # the node a copy made by `by_node` reads on
        self._bucket: np.ndarray | None = None  # by piece key: its bucket, once a copy is placed
        self._estimate = self._check_share()

    @functools.cached_property
    def _media_bytes(self) -> list[str]:
        """The media columns (of records that name media) given as their files' bytes; decided on first use, as
        `_contents_type`."""
        reader = self._source.reader
        if not isinstance(reader, MediaReader):
            return []
        wanted = self._want_bytes if self._want_bytes is not None else len(_cluster_nodes()) > 1
        return list(reader.media()) if wanted else []

    @functools.cached_property
    def _contents_type(self) -> pa.DataType | None:
        """The `bytes` column's type, None for no such column (a table's rows have none).

        Decided on first use rather than when made: by then Ray is up (it
        starts before Ray Data plans a read), so the default can ask how
        many nodes the cluster has, while a bad path still fails before Ray starts.
        """
        if self._tables:
            return None
        wanted = self._want_bytes if self._want_bytes is not None else len(_cluster_nodes()) > 1
        return bytes_type(self._source.reader.largest()) if wanted else None

    # -- what Ray asks of a datasource -------------------------------------------------------

    def get_name(self) -> str:
        return f"UCVolume{self._source.mode.capitalize()}"

    def estimate_inmemory_data_size(self) -> int:
        rows, contents = self._estimate
        return rows + contents * (self._contents_type is not None)

    def supports_projection_pushdown(self) -> bool:
        return self._tables

    def schema(self) -> pa.Schema:
        """The rows' schema (projected when columns were selected)."""
        if not self._tables:
            return files_schema(include_paths=self._include_paths, contents_type=self._contents_type)
        columns = self._get_data_columns()
        s = contents_schema(self._source.reader.schema(), self._media_bytes)
        if self._include_paths:
            s = s.append(pa.field("path", pa.string()))
        return s if columns is None else pa.schema([s.field(c) for c in columns if c in s.names])

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: DataContext | None = None) -> list[ReadTask]:
        """This rank's share, dealt into at most `parallelism` byte-balanced read tasks.

        Deterministic for a given execution (Ray calls this several times):
        the shuffle depends on the seed and the execution index alone.
        """
        epoch = data_context._execution_idx if data_context is not None and self._reseed else 0
        context = data_context or DataContext.get_current()
        block_bytes = context.target_max_block_size or DEFAULT_BLOCK_BYTES
        reader = self._source.reader
        keys, pieces = self._share(epoch)
        columns = self._get_data_columns() if self._tables else None
        if columns == []:  # a count: Ray joins blocks without columns into none of their rows, so keep one
            columns = reader.schema().names[:1]
        schema = self.schema()
        weights = reader.weights(pieces)
        nodes, by_owner = self._owners(keys)
        owners = owners_mod.readers([n for n in by_owner if n is not None]) if nodes else {}
        tasks = []
        for node, members in by_owner.items():
            share = parallelism if node is None else parallelism * nodes[node] / sum(nodes.values())
            parts = task_plan.task_count(len(members), max(1, round(share)), min_per_task=reader.pieces_per_task)
            # Its pieces as an array of objects: each task's are gathered in one step (10^6 files: ~0.1 s, not ~0.6).
            held = np.fromiter(map(pieces.__getitem__, members), dtype=object, count=len(members))
            groups = task_plan.groups(list(map(weights.__getitem__, members)), parts)
            for part in reader.parts([held[g].tolist() for g in groups], self._planning, epoch=epoch):
                if self._tables:
                    read_fn = table_read_fn(self._tasks, part, columns=columns, include_paths=self._include_paths
                                            and (columns is None or "path" in columns), media_bytes=self._media_bytes)
                    size = part.nbytes
                else:
                    read_fn = files_read_fn(self._tasks, part, include_paths=self._include_paths,
                                            contents_type=self._contents_type, max_block_bytes=block_bytes,
                                            max_block_rows=per_task_row_limit, keep_count=self._planning.equalize != "none")
                    size = self._row_bytes(part.files)
                    size += part.nbytes if self._contents_type is not None else 0
                if node is not None:
                    read_fn = owners_mod.owned(read_fn, node, owners[node])
                meta = BlockMetadata(num_rows=part.rows, size_bytes=size, input_files=part.input_files,
                                     exec_stats=None)
                tasks.append(ReadTask(read_fn, meta, schema=schema, per_task_row_limit=per_task_row_limit))
        return tasks

    def by_node(self, nodes: Mapping[str, float]) -> dict[str, UCVolumeDatasource]:
        """This datasource cut into one datasource per node, each to be read on its node.

        The parts are disjoint and together read what this datasource reads.
        They depend on the listing and `nodes` (node id -> CPUs) alone, so
        every execution reads the same files on the same node, each node
        holds its CPU share of the bytes within one bucket, and a change of
        nodes moves little more than the buckets of the nodes that changed
        (see `placement`). Nodes that get no bucket are left out.
        """
        self._contents_type, self._media_bytes  # decided once, for every part
        weights, bucket = self._buckets()
        owner = np.array(placement.place(weights, nodes))
        parts = {}
        for node in dict.fromkeys(owner.tolist()):
            part = copy.copy(self)
            part._placed, part._bucket, part._node = owner == node, bucket, node
            part._estimate = part._check_share()
            parts[node] = part
        return parts

    def __getstate__(self) -> dict:
        # The item -> bucket map is as long as the listing: a copy that travels makes it again.
        return {**self.__dict__, "_bucket": None}

    # -- planning ------------------------------------------------------------------------------

    def _buckets(self) -> tuple[list[int], np.ndarray]:
        """(bytes of each bucket, bucket of each piece key): this rank's pieces, keyed as its reader keys them."""
        weights = self._source.reader.share_weights(self._rank, self._world_size, equalize=self._planning.equalize)
        count = placement.bucket_count(len(weights))
        bucket = placement.buckets(weights, count)
        return np.bincount(bucket, weights=weights, minlength=count).astype(np.int64).tolist(), bucket

    def _share(self, epoch: int) -> tuple[np.ndarray, list]:
        """(key, piece) of the pieces this copy reads in `epoch`, in read order: this rank's, less other nodes'
        buckets."""
        keys, pieces = self._source.reader.share(self._rank, self._world_size, self._planning, epoch=epoch)
        if self._placed is None:
            return keys, pieces
        if self._bucket is None:
            self._bucket = self._buckets()[1]
        keep = self._placed[self._bucket[keys]]
        return keys[keep], [p for p, k in zip(pieces, keep.tolist()) if k]

    def _owners(self, keys: np.ndarray) -> tuple[dict[str, float], dict[str | None, list[int]]]:
        """(the nodes that read, node id -> CPUs; the positions of `keys` each node owns).

        One node, or none known (Ray not started here): every piece is read
        where its task runs (None). A copy from `by_node`: its node owns all,
        while it is alive. Else each piece's bucket is placed as `by_node`
        places it.
        """
        nodes = {n: cpus for n, cpus in _cluster_nodes().items() if cpus > 0}
        every = list(range(len(keys)))
        if len(nodes) < 2 or (self._node is not None and self._node not in nodes):
            return {}, {None: every}
        if self._node is not None:
            return nodes, {self._node: every}
        weights, bucket = self._buckets()
        owner = placement.place(weights, nodes)
        out: dict[str | None, list[int]] = {}
        for k, b in enumerate(bucket[keys].tolist()):
            out.setdefault(owner[b], []).append(k)
        return nodes, out

    def _check_share(self) -> tuple[int, int]:
        """Raise on the driver if this copy would read nothing; return its in-memory size (rows, contents)."""
        reader = self._source.reader
        pieces = self._share(0)[1]
        if not pieces:
            raise OptionError(
                f"rank {self._rank} of {self._world_size} gets no {reader.counts} of {self._source.given}: "
                "use equalize='pad', or fewer ranks"
            )
        if self._tables:
            return sum(reader.weights(pieces)), 0
        files = reader.files_of(pieces, Planning())  # which files, in any order
        return self._row_bytes(files), int(reader.sizes_of(files).sum())

    def _row_bytes(self, items: Sequence[int]) -> int:
        """Arrow bytes of the rows of files `items` but their contents: their strings and sizes."""
        n = len(items) * (_ROW_BYTES + entry_path_length(self._tasks.cache_dir or default_dir()))
        if self._include_paths:
            n += int(self._source.reader.path_lengths(np.asarray(items, dtype=np.int64)).sum())
        return n


def read_uc_volume(
    path: str | None = None,
    *,
    override_num_blocks: int | None = None,
    concurrency: int | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    memory: float | None = None,
    columns: Sequence[str] | None = None,
    **options: Any,
) -> Dataset:
    """A Ray Dataset of the files, or Parquet rows, under a volume folder.

    `options` are `UCVolumeDatasource`'s (mode, include_bytes, rank,
    world_size, equalize, shuffle, ...); the rest are Ray's `read_*`
    arguments of the same names. Bad options and paths raise here, on the driver.

    `columns`, as in `read_parquet`: the columns to keep, in this order. In
    Parquet mode only those are decoded (it is `select_columns`, which Ray
    pushes down into the read).

    `override_num_blocks` defaults to one read task per CPU of the cluster.
    Ray's own default asks for at least 200 blocks and cuts a small volume's
    output into ~1 MiB pieces to get them, which costs more than the reads.
    The tasks are byte-balanced, so a second wave of them would only add
    start-up and tail time, and each yields blocks of at most
    `DataContext.target_max_block_size` however much it reads.

    On a cluster with several nodes that have CPUs, the data is cut into one
    part per node (`UCVolumeDatasource.by_node`), each read by its own read
    operator whose tasks prefer that node (soft node affinity: a busy or lost
    node delays nothing, its tasks run elsewhere), and the parts are joined
    with `Dataset.union`. Every execution then reads each file on the same
    node, so from the second one on nothing comes from the volume. The parts
    follow the nodes alive when the Dataset is made: make it again after
    the cluster grows or shrinks. `override_num_blocks` and `concurrency`
    are shared out by the nodes' CPUs (at least one each).

    Example:
        >>> ds = read_uc_volume("/Volumes/main/ml/raw/images", include_bytes=True)  # doctest: +SKIP
        >>> ds.map_batches(decode).iter_torch_batches(batch_size=64)  # doctest: +SKIP
    """
    ray_args = ("override_num_blocks", "concurrency", "num_cpus", "num_gpus", "memory", "columns")
    check.reject_unknown([k for k in options if k not in datasource_options()], datasource_options() + ray_args,
                         what="read_uc_volume")
    check.whole("override_num_blocks", override_num_blocks, low=1, optional=True)
    source = UCVolumeDatasource(path, **options)
    if not ray.is_initialized():
        ray.init()  # as ray.data.read_* would on first use: the cluster decides the parts and the `bytes` column
    if columns is not None:
        check_columns(columns, source.schema().names)
    nodes = {n: cpus for n, cpus in _cluster_nodes().items() if cpus > 0}
    blocks = override_num_blocks or max(1, int(sum(nodes.values())))
    args = {"num_cpus": num_cpus, "num_gpus": num_gpus, "memory": memory}
    if len(nodes) > 1:
        parts = source.by_node(nodes)
        share = {n: nodes[n] / sum(nodes[m] for m in parts) for n in parts}
        with warnings.catch_warnings():
            # Ray 2.60 deprecates `ray_remote_args` but has no named parameter for a scheduling strategy.
            warnings.simplefilter("ignore", RayDeprecationWarning)
            reads = [
                ray.data.read_datasource(
                    part, override_num_blocks=max(1, round(blocks * share[node])),
                    concurrency=concurrency and max(1, round(concurrency * share[node])),
                    ray_remote_args={"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=True)},
                    **args,
                )
                for node, part in parts.items()
            ]
        ds = reads[0].union(*reads[1:]) if len(reads) > 1 else reads[0]
    else:
        ds = ray.data.read_datasource(source, override_num_blocks=blocks, concurrency=concurrency, **args)
    return ds if columns is None else ds.select_columns(list(columns))


def _cluster_nodes() -> dict[str, float]:
    """The running Ray cluster's alive nodes, node id -> CPUs; empty when Ray is not running here."""
    if not ray.is_initialized():
        return {}
    return {n["NodeID"]: n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["Alive"]}


def datasource_options() -> tuple[str, ...]:
    """The keyword options `UCVolumeDatasource` takes."""
    params = inspect.signature(UCVolumeDatasource.__init__).parameters.values()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _shuffle_seed(shuffle: Shuffle) -> tuple[int | None, bool]:
    """(seed, reseed every execution) for a Ray-style `shuffle` argument; seed None: no shuffle."""
    if shuffle is None or shuffle is False:
        return None, False
    if shuffle == "files":
        return random.randrange(2**32), True
    if isinstance(shuffle, FileShuffleConfig):
        if shuffle.seed is None:
            return random.randrange(2**32), True
        return shuffle.seed, shuffle.reseed_after_execution
    raise OptionError(f"shuffle={shuffle!r}: give None, 'files' or a ray.data.FileShuffleConfig")
