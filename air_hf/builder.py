"""The `uc-volume` builder: a Unity Catalog volume folder as a Hugging Face dataset.

The builder lists the volume itself, through the core, when it is made (the
listing's fingerprint joins the config id, so the Arrow cache of a
non-streaming load is rebuilt when files change). The listing travels to
DataLoader workers as a file in the node cache folder; shards are lists of
manifest indices (files mode) or of row ranges (Parquet mode). Every read goes
through the core's node cache and fetch pool, ahead of the consumer.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
from dataclasses import dataclass
from itertools import islice
from typing import Iterable, Iterator, Union

import datasets
import pyarrow as pa

from air_core import Cache, Manifest, read_items, tabular, volume
from air_core.errors import OptionError
from air_core.grid import detect_rank
from air_core.manifest import shared_manifest
from air_core.plan import EQUALIZES
from air_core.stream import default_fetch_threads

from . import rows
from .shards import file_shards, row_shards, shard_count
from .splits import by_split

MODES = ("auto", "files", "parquet")
FILES_PER_TABLE = 64


@dataclass
class UCVolumeConfig(datasets.BuilderConfig):
    """Options of `load_dataset("uc-volume", ...)`.

    Attributes:
        data_dir: the volume folder to read, `/Volumes/<catalog>/<schema>/<volume>/<folder>`
            (or `dbfs:/Volumes/...`); with `delta_table`, where the table is exported.
        include: glob(s) of files to keep, relative to `data_dir` (`*` crosses `/`).
        exclude: glob(s) of files to leave out.
        mode: "files" (a row per file), "parquet" (the tables' rows; row groups are the
            units), or "auto": "parquet" when every file is `.parquet`, "files" when none is.
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
        node_cache_limit: cap on the node cache's bytes; None for no cap.
        fetch_threads: concurrent reads from the volume per DataLoader worker (default:
            32 when there are several workers, else 64).
        delta_table: a Delta table to export to `data_dir` as Parquet and stream.
        columns: Parquet mode: the columns to read, as `load_dataset("parquet", columns=...)`;
            the others are never decoded.
    """

    include: Union[str, list, None] = None
    exclude: Union[str, list, None] = None
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
    fetch_threads: Union[int, None] = None
    delta_table: Union[str, None] = None
    columns: Union[list, None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.data_dir:
            raise OptionError(
                "uc-volume needs data_dir=, the volume folder to read: "
                "load_dataset('uc-volume', data_dir='/Volumes/<catalog>/<schema>/<volume>/<folder>')"
            )
        volume.parse(self.data_dir)
        for name, value, choices in (("mode", self.mode, MODES), ("decode", self.decode, rows.DECODES),
                                     ("equalize", self.equalize, EQUALIZES)):
            if value not in choices:
                raise OptionError(f"{name}={value!r}: choose one of {choices}")
        for name in ("labels", "shuffle"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"{name}={getattr(self, name)!r}: give True or False")
        for name, low, optional in (("seed", 0, False), ("world_size", 1, True), ("num_workers", 1, True),
                                    ("fetch_threads", 1, True), ("node_cache_limit", 0, True)):
            value = getattr(self, name)
            if not (optional and value is None) and (not _is_int(value) or value < low):
                raise OptionError(f"{name}={value!r}: give a whole number >= {low}"
                                  + (", or None" if optional else ""))
        if self.columns is not None and (not isinstance(self.columns, (list, tuple)) or not self.columns
                                         or not all(isinstance(c, str) for c in self.columns)):
            raise OptionError(f"columns={self.columns!r}: give a non-empty list of column names")
        if self.delta_table and self.mode == "files":
            raise OptionError("delta_table= exports Parquet: leave mode unset or give mode='parquet'")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Source:
    """What the builder reads: a saved listing, its mode and the row features. Small when pickled."""

    manifest_file: str
    fingerprint: str
    mode: str
    features: datasets.Features

    @classmethod
    def resolve(cls, config: UCVolumeConfig) -> "Source":
        """List the volume (rank 0 lists and broadcasts under torch.distributed) and pick the mode."""
        data_dir, mode = config.data_dir, config.mode
        if config.delta_table:
            # -- Delta: export the table to data_dir as Parquet (once per table version), then
            # stream that export's own folder, which stays put while a newer export replaces data_dir.
            from air_core.delta import export_delta

            data_dir, mode = export_delta(config.delta_table, data_dir).path, "parquet"
        manifest = shared_manifest(data_dir, include=config.include, exclude=config.exclude)
        if mode == "auto":
            try:
                mode = "parquet" if tabular.is_parquet_tree(manifest) else "files"
            except OptionError as e:
                raise OptionError(f"{e}; to read every file as a row, pass mode='files'") from None
        if mode == "parquet":
            if config.decode != "path" or config.labels:
                raise OptionError("decode= and labels= apply to files mode: the Parquet mode's rows are "
                                  "the tables' rows; pass mode='files' to read Parquet files as files")
            schema = _parquet_schema(manifest)
            if config.columns is not None:
                if any(c not in schema.names for c in config.columns):
                    raise OptionError(f"columns={config.columns!r}: the tables' columns are {schema.names}")
                schema = pa.schema([schema.field(c) for c in config.columns])
            features = datasets.Features.from_arrow_schema(schema)
        else:
            if config.columns is not None:
                raise OptionError("columns= applies to Parquet mode: a row per file has the columns "
                                  "path, local_path, size and what decode= adds")
            rows.check_media(manifest, config.decode)
            features = rows.features(config.decode, rows.label_names(manifest) if config.labels else None)
        cache = Cache(config.node_cache_dir, limit_bytes=config.node_cache_limit)
        return cls(_save(manifest, cache.root), manifest.fingerprint, mode, features)

    def manifest(self) -> Manifest:
        return _load(self.manifest_file)


def _parquet_schema(manifest: Manifest) -> pa.Schema:
    try:
        return tabular.schema(manifest, [])
    except (pa.ArrowException, OSError) as e:
        raise tabular.ParquetError(
            f"{manifest.volume_path(0)} is not a readable Parquet file ({e}); remove or replace it, "
            "or leave it out with exclude="
        ) from None


def _save(manifest: Manifest, cache_root: str) -> str:
    """The listing as a file in the node cache folder, named for its folder and contents."""
    folder = os.path.join(cache_root, "manifests")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    where = hashlib.sha256(manifest.root.encode()).hexdigest()[:12]
    file = os.path.join(folder, f"{manifest.fingerprint}-{where}.json.gz")
    if not os.path.exists(file):
        manifest.save(file)
    _remember(file, manifest)
    return file


_manifests: dict[str, Manifest] = {}  # the last few listings this process used, by file


def _remember(file: str, manifest: Manifest) -> Manifest:
    _manifests[file] = manifest
    while len(_manifests) > 4:
        del _manifests[next(iter(_manifests))]
    return manifest


def _load(file: str) -> Manifest:
    """The saved listing, read once per process (forked DataLoader workers inherit it)."""
    return _manifests.get(file) or _remember(file, Manifest.load(file))


_OPTIONS = frozenset(f.name for f in dataclasses.fields(UCVolumeConfig))


def _check_option_names(names: Iterable[str]) -> None:
    unknown = sorted(set(names) - _OPTIONS - {"config_id"})
    if unknown:
        public = sorted(_OPTIONS - {"name", "version", "data_files", "description"})
        close = difflib.get_close_matches(unknown[0], public, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise OptionError(f"unknown option {unknown[0]!r} for uc-volume{hint}; the options are: {', '.join(public)}")


class UCVolume(datasets.ArrowBasedBuilder):
    """Streams a volume folder: a row per file, or the rows of a Parquet tree."""

    BUILDER_CONFIG_CLASS = UCVolumeConfig
    config: UCVolumeConfig
    _embed_media = False

    def _create_builder_config(self, config_name=None, custom_features=None, **config_kwargs):
        # datasets resolves a config's data here; this builder resolves its listing, whose
        # fingerprint joins the config id so that a changed folder gets a fresh Arrow cache.
        _check_option_names(config_kwargs)
        config, config_id = super()._create_builder_config(config_name, custom_features, **config_kwargs)
        self._source = Source.resolve(config)
        return config, f"{config_id}-{self._source.fingerprint[:16]}"

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(features=self._source.features)

    def _split_generators(self, dl_manager) -> list[datasets.SplitGenerator]:
        c, manifest = self.config, self._source.manifest()
        world_size = c.world_size or detect_rank()[1]
        units = tabular.parquet_units(manifest) if self._source.mode == "parquet" else None
        generators = []
        for split, files in by_split(manifest.paths).items():
            if units is None:
                n = shard_count(len(files), world_size=world_size, num_workers=c.num_workers)
                dealt = file_shards([manifest.sizes[i] for i in files], n, seed=c.seed, shuffle=c.shuffle,
                                    equalize=c.equalize)
                shards: list = [[files[k] for k in shard] for shard in dealt]
            else:
                member = set(files)
                mine = [u for u in units if u.file in member]
                n = shard_count(len(mine), world_size=world_size, num_workers=c.num_workers)
                shards = row_shards(mine, n, seed=c.seed, shuffle=c.shuffle, equalize=c.equalize)
            # A list in gen_kwargs is what datasets shards over: one element per shard.
            generators.append(datasets.SplitGenerator(name=split, gen_kwargs={"shards": shards}))
        return generators

    def _prepare_split(self, split_generator, **kwargs):
        # A non-streaming load writes the rows into datasets' Arrow cache, which outlives the
        # node cache: image and audio rows then carry their bytes, not the path of a copy that
        # a prune may remove.
        self._embed_media = True
        return super()._prepare_split(split_generator, **kwargs)

    def _generate_tables(self, shards: list) -> Iterator[tuple[int, pa.Table]]:
        c, manifest = self.config, self._source.manifest()
        cache = Cache(c.node_cache_dir, limit_bytes=c.node_cache_limit)
        threads = c.fetch_threads or default_fetch_threads()
        if self._source.mode == "parquet":
            pieces = [piece for shard in shards for piece in shard]
            tables = tabular.read_units(manifest, pieces, cache, columns=c.columns, fetch_threads=threads)
            names = list(self._source.features)
            yield from enumerate(t.select(names) for t in tables)
            return
        items = [i for shard in shards for i in shard]
        features = self._source.features
        schema = features.arrow_schema
        files = read_items(manifest, items, cache, fetch_threads=threads)
        for k in range(-(-len(items) // FILES_PER_TABLE)):
            yield k, rows.table(list(islice(files, FILES_PER_TABLE)), manifest, features, schema, c.decode,
                                embed_media=self._embed_media)
