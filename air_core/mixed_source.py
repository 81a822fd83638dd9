"""A mixture: several volume folders read as one stream, each with its share of every epoch.

`resolve_sources` checks what a front door is given as `sources=` (a list of
dicts: each a folder's `path`, its selection, and one weight) and resolves
every folder as `resolve_source` does one. The `MixedSource` it returns
plans and reads like a `Source` of loose files: its listing is the sources'
listings end to end (an item is its position there), each epoch's items are
`air_core.planning.mixture`'s, and they are dealt over ranks and workers,
shuffled and resumed by the planners every stream uses.

`resolve_specs` and `Mixed` serve a mixture of tables' rows too
(`air_core.mixed_table`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from . import options
from .errors import OptionError
from .grid import Grid
from .io import volume
from .io.cache import Cache
from .planning import mixture, resume
from .planning import shares as plan_mod
from .io.files import (DEFAULT_FETCH_THREADS, DEFAULT_PREFETCH, DEFAULT_PREFETCH_BYTES, ROWS_AT_ONCE, CachedFile,
                       Columns, OnError, Row, Skipped, chunked, read_columns, read_rows)
from .read.files import FilesReader
from .manifest import Manifest
from .read.reader import FileRowsReader, Part
from .source import Source, resolve_source

# What a source of a mixture may say besides its weight: the selection of its folder's files.
SOURCE_OPTIONS = ("path", "include", "exclude", "file_extensions", "mode", "delta_table", "delta_version")


# The modes a mixture of tables' rows reads (`air_core.mixed_table`); any other but "files" is not mixed.
ROW_MODES = ("parquet", "json", "csv", "text")


def resolve_sources(sources: Sequence[Mapping[str, Any]], *, rows_here: str, epoch_size: int | None = None,
                    cache_dir: str | None = None) -> MixedSource:
    """Check and resolve a mixture's `sources` (see `air_core.FileStream`); `rows_here`: how the door that
    asks mixes tables' rows, for the message that refuses a source of them.

    Raises:
        OptionError: a source that is not a dict with a `path`, an unknown key,
            no weight or two, weights of different kinds, a weight out of range,
            `epoch_size` with `repeat` or `choose`, a source not of loose files
            (whether its dict says so, checked before any folder is listed, or
            its files do, in mode "auto").
        VolumePathError, EmptyVolumeError: a source folder that is missing or empty
            (naming it), as for one folder.
    """
    refuse_rows(sources, rows_here=rows_here)
    resolved, kind, weights, names = resolve_specs(sources, mode="files", cache_dir=cache_dir)
    for source, name in zip(resolved, names):
        if source.mode in ROW_MODES:
            raise OptionError(_rows_refused(name, f"is read in mode {source.mode!r} (what its files are)", rows_here,
                                            files_too=True))
        if source.mode != "files":
            raise OptionError(f"{name} is read in mode {source.mode!r}: a mixture reads loose files (mode 'files') "
                              f"or tables' rows (modes {', '.join(ROW_MODES)}), not mode {source.mode!r}; give "
                              "mode='files' in its dict to read its files")
    return MixedSource(resolved, kind, weights, epoch_size, names, [len(s.manifest) for s in resolved])


def refuse_rows(sources: object, *, rows_here: str) -> None:
    """Refuse a source of a mixture read as loose files whose dict asks for a table's rows (a mode of
    `ROW_MODES`, or a Delta table), saying how the door that checks it mixes tables' rows (`rows_here`):
    each door's own way, checked with its other options, before any folder is listed.

    Raises:
        OptionError: naming the first such source and its mode.
    """
    if not isinstance(sources, Sequence) or isinstance(sources, str):
        return  # not a list: resolving the mixture says what to give
    for i, spec in enumerate(sources):
        if not isinstance(spec, Mapping):
            continue
        if spec.get("mode") in ROW_MODES or spec.get("delta_table") is not None:
            asks = f"mode {spec['mode']!r}" if spec.get("mode") in ROW_MODES else "a Delta table"
            raise OptionError(_rows_refused(f"sources[{i}] ({spec.get('path')})", f"asks for {asks}", rows_here,
                                            files_too=spec.get("delta_table") is None))


def _rows_refused(name: str, reads: str, rows_here: str, *, files_too: bool) -> str:
    return (f"{name} {reads}, a table's rows, in a mixture of loose files: mix tables' rows with "
            f"{rows_here}" + (", or give mode='files' in its dict to read its files" if files_too else ""))


def resolve_specs(sources: Sequence[Mapping[str, Any]], *, mode: str,
                  cache_dir: str | None) -> tuple[list[Source], mixture.Weight, list[float], list[str]]:
    """Each source of a mixture checked and resolved (`mode`: a source's mode when its dict names none):
    (the sources, their kind of weight, their weights, their names for messages)."""
    if isinstance(sources, (str, Mapping)) or not isinstance(sources, Sequence) or not sources:
        raise OptionError(f"sources={sources!r:.200}: give a non-empty list of dicts, each with a 'path' and one of "
                          f"{mixture.WEIGHTS}, e.g. [{{'path': '/Volumes/c/s/v/chat', 'proportion': 0.6}}, ...]")
    kinds: list[tuple[str, str]] = []
    resolved, weights = [], []
    for i, spec in enumerate(sources):
        name = f"sources[{i}]"
        if not isinstance(spec, Mapping) or not isinstance(spec.get("path"), str):
            raise OptionError(f"{name}={spec!r:.200}: give a dict with the folder's 'path' (a str) and its weight")
        name = f"sources[{i}] ({spec['path']})"
        options.reject_unknown(spec, SOURCE_OPTIONS + mixture.WEIGHTS, what=f"a source of a mixture, {name}")
        given = [k for k in mixture.WEIGHTS if k in spec]
        if len(given) != 1:
            raise OptionError(f"{name}: give exactly one weight, one of {mixture.WEIGHTS}"
                              + (f" (it has {given})" if given else ""))
        kinds.append((given[0], name))
        if given[0] != kinds[0][0]:
            raise OptionError(f"{kinds[0][1]} has a {kinds[0][0]!r} but {name} a {given[0]!r}: give every source "
                              "of a mixture the same kind of weight")
        resolved.append(resolve_source(spec["path"], mode=spec.get("mode", "auto" if "delta_table" in spec else mode),
                                       include=spec.get("include"), exclude=spec.get("exclude"),
                                       file_extensions=spec.get("file_extensions"),
                                       delta_table=spec.get("delta_table"), delta_version=spec.get("delta_version"),
                                       cache_dir=cache_dir))
        weights.append(spec[given[0]])
    return resolved, kinds[0][0], weights, [name for _, name in kinds]  # type: ignore[return-value]


class Mixed:
    """What every mixture holds, whatever it reads: its sources, weights, counts per epoch and fingerprint.

    Args:
        sizes: each source's items (files, or rows), which the weights are of.

    Attributes:
        sources: the resolved sources, in the order given.
        kind, weights, epoch_size: the mixture's weights, as given.
        counts: the items each source gives every epoch.
        names: each source as messages name it.
        path, given: the sources' folders, for messages.
        fingerprint: a digest of the whole, the sources' listings' digests
            and their counts (`<digest>:<digest>.<digest>...:<count>.<count>...`):
            a state saved over another mixture is refused, saying which differ.
    """

    def __init__(self, sources: list[Source], kind: mixture.Weight, weights: list[float], epoch_size: int | None,
                 names: list[str], sizes: list[int]) -> None:
        self.sources, self.kind, self.weights, self.epoch_size = sources, kind, weights, epoch_size
        self.counts = mixture.source_counts(sizes, kind, weights, epoch_size=epoch_size, names=names)
        self.names = names
        self.path = self.given = "[" + ", ".join(s.path for s in sources) + "]"
        # The plan depends on the listings and on each source's count alone, not on how the weights said it.
        described = (".".join(hashlib.sha256(s.fingerprint.encode()).hexdigest()[:12] for s in sources) + ":"
                     + ".".join(map(str, self.counts)))
        # First a digest of the whole, as a folder's fingerprint is: what a prefix of it (HF's cache id) names.
        self.fingerprint = f"{hashlib.sha256(described.encode()).hexdigest()[:16]}:{described}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path}, {self.kind}={self.weights}, fingerprint={self.fingerprint!r})"

    def changed_since(self, saved: str) -> str:
        """Why a state saved over the mixture `saved` (its fingerprint) does not resume over this one: the
        sources whose files differ, or each source's items per epoch."""
        parts = saved.split(":") if isinstance(saved, str) else []
        if len(parts) != 3:
            return (f"the state was saved over another source (fingerprint {saved!r:.100}), not this mixture of "
                    f"{self.path}: resume a mixture from a state of the same mixture")
        saved_digests, saved_counts = parts[1].split("."), parts[2].split(".")
        digests = self.fingerprint.split(":")[1].split(".")
        if len(saved_digests) != len(digests):
            return (f"the state was saved over a mixture of {len(saved_digests)} sources, this one has "
                    f"{len(digests)} ({self.path}): resume with the sources it was saved with")
        changed = [name for name, a, b in zip(self.names, saved_digests, digests) if a != b]
        if changed:
            return (f"{', '.join(changed)}: its files are not the ones the state was saved over (the folder changed "
                    "since, or the source names another folder or selection); resume needs the same files")
        return (f"the state was saved with {', '.join(saved_counts)} items per epoch from the sources, this "
                f"mixture gives {', '.join(map(str, self.counts))} ({self.path}): its weights or epoch_size changed; "
                "resume with the ones it was saved with")


class MixedSource(Mixed):
    """Several folders of loose files read as one (make one with `resolve_sources`); it stands where a `Source`
    of loose files does.

    Attributes:
        mode: "files".
    """

    mode = "files"
    _mixture: mixture.Mixture | None = None  # the planner, made on first use (not pickled)

    @property
    def reader(self) -> MixtureReader:
        """How a stream plans and reads the mixture."""
        return MixtureReader(self)

    @property
    def manifest(self):
        raise OptionError(f"a mixture has a listing per source, not one: read each of {self.path} with "
                          "air_core.resolve_source(path).manifest")

    def epoch(self, epoch: int, seed: int) -> mixture.Epoch:
        """The items of `epoch` (the planner, made on first use, keeps the last one and what all epochs share)."""
        if self._mixture is None:
            manifests = [s.manifest for s in self.sources]
            self._mixture = mixture.Mixture([m.sizes for m in manifests], self.counts,
                                            by_size=[m.largest_first for m in manifests])
        return self._mixture.epoch(epoch, seed)

    @cached_property
    def offsets(self) -> np.ndarray:
        """Where each source's items start in the mixture's listing (and, last, its length)."""
        return np.concatenate([[0], np.cumsum([len(s.manifest) for s in self.sources])]).astype(np.int64)

    def locate(self, items: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(source, positions in `items`, listing positions in the source) of the `items` of each source."""
        offsets = self.offsets
        which = np.searchsorted(offsets, items, side="right") - 1
        if len(which) and which[0] == which[-1] and (which == which[0]).all():  # a run of one source's items
            s = int(which[0])
            yield s, np.arange(len(items)), items - offsets[s]
            return
        for s in np.unique(which).tolist():
            at = np.flatnonzero(which == s)
            yield s, at, items[at] - offsets[s]

    def __getstate__(self) -> dict:
        state = {**self.__dict__, "_mixture": None}
        state.pop("offsets", None)
        return state


class MixtureReader(FileRowsReader):
    """The `FileRowsReader` of a mixture, as `FileStream`, the `uc-volume` builder and `UCVolumeDatasource` use
    it: its items are places in the mixture's listing, and an epoch may hold one several times."""

    source: MixedSource

    def epoch_pieces(self, planning: plan_mod.Planning, *, epoch: int) -> list[int]:
        """The items `epoch` holds (with repeats, drawn by the planning's `seed`), the sources interleaved: a door
        that deals them itself."""
        return self.source.epoch(epoch, planning.seed).items.tolist()

    def pieces(self, files: Sequence[int]) -> list[int]:
        return list(files)

    def count(self, pieces: Sequence[int]) -> int:
        return len(pieces)

    def deal(self, pieces: Sequence[int], parts: int, planning: plan_mod.Planning) -> list[list[int]]:
        """`pieces` dealt into `parts` byte-balanced parts, by position (an item held twice may go to two)."""
        sizes = self.sizes_of(pieces)
        dealt = plan_mod.rank_shares(sizes, world_size=parts, planning=planning)
        return [[pieces[k] for k in part] for part in dealt]

    def files_of(self, pieces: Sequence[int], planning: plan_mod.Planning) -> list[int]:
        return list(pieces)

    def check(self, **opts: Any) -> None:
        """Refuse what some source's reader refuses."""
        for source in self.source.sources:
            source.reader.check(**opts)

    def plan(self, grid: Grid, resumed_from: dict | None, planning: plan_mod.Planning, *, epoch: int) -> list[int]:
        """The items one stream reads in `epoch` after resuming the run `resumed_from`."""
        ep = self.source.epoch(epoch, planning.seed)
        slots = resume.plan_resume(ep.sizes, grid, resumed_from, planning=planning, epoch=epoch,
                                   deal_order=ep.deal_order if planning.balance == "bytes" else None)
        return ep.items_at(slots).tolist()

    def plan_epoch(self, planning: plan_mod.Planning, epoch: int) -> int:
        """The epoch itself: each epoch draws its own items from the sources (see `Reader.plan_epoch`)."""
        return epoch

    def rank_count(self, rank: int, world_size: int, planning: plan_mod.Planning, *, epoch: int) -> int:
        """How many items `rank` reads in `epoch`."""
        ep = self.source.epoch(epoch, planning.seed)
        order = plan_mod.Epoch(ep.sizes, epoch=epoch, planning=planning,
                               by_size=ep.deal_order(world_size) if planning.balance == "bytes" else None)
        return len(plan_mod.Deal(order, world_size, excluded=None).share(rank))

    def read_files(self, items: Sequence[int], cache: Cache, *, fetch_threads: int, on_error: OnError = "raise",
                   **fetch: int) -> Iterator[CachedFile | Skipped]:
        """The items, in order, through the node cache, fetched ahead (one pool for every source)."""
        return read_columns(self._columns(items), cache, fetch_threads=fetch_threads, on_error=on_error, **fetch)

    def _columns(self, items: Iterable[int]) -> Iterator[Columns]:
        """The items' columns, decoded a chunk at a time, source by source within the chunk, from each
        listing's remembered rows (`Manifest.volume_rows`): a warm pass makes no row, as for one folder."""
        manifests = [s.manifest for s in self.source.sources]
        local: list[str | None] = [None] * len(manifests)  # where each folder lies here: only a miss asks
        for chunk in chunked(items):
            n = len(chunk)
            vpaths: list[Any] = [None] * n
            sizes, mtimes, which = [0] * n, [0] * n, [0] * n
            for s, at, files in self.source.locate(np.asarray(chunk, dtype=np.int64)):
                for k, (v, size, mtime) in zip(at.tolist(), manifests[s].volume_rows(files.tolist())):
                    vpaths[k], sizes[k], mtimes[k], which[k] = v, size, mtime, s

            def rows(k: int, chunk: list[int] = chunk, vpaths: list[str] = vpaths, sizes: list[int] = sizes,
                     mtimes: list[int] = mtimes, which: list[int] = which) -> list[Row]:
                for s in set(which[k:]):
                    if local[s] is None:
                        local[s] = volume.parse(manifests[s].root).local
                return [(chunk[j], vpaths[j], f"{local[which[j]]}{vpaths[j][len(manifests[which[j]].root):]}",
                         sizes[j], mtimes[j]) for j in range(k, len(chunk))]

            yield chunk, vpaths, sizes, mtimes, rows

    # -- what a Ray datasource asks --------------------------------------------------

    pieces_per_task = FilesReader.pieces_per_task

    def share(self, rank: int, world_size: int, planning: plan_mod.Planning, *,
              epoch: int) -> tuple[np.ndarray, list[int]]:
        """`rank`'s items in `epoch`, in read order, each keyed by itself: its place in the mixture's listing."""
        items = self.plan(Grid(rank, world_size), None, planning, epoch=epoch)
        return np.asarray(items, dtype=np.int64), items

    def share_weights(self, rank: int, world_size: int, *, equalize: plan_mod.Equalize) -> np.ndarray:
        """The bytes of every item of the mixture's listing (any may be drawn into a rank's share)."""
        return np.concatenate([s.manifest.sizes for s in self.source.sources])

    def sizes_of(self, files: Sequence[int]) -> np.ndarray:
        out = np.empty(len(files), np.int64)
        for s, at, local in self.source.locate(np.asarray(files, dtype=np.int64)):
            out[at] = self.source.sources[s].manifest.sizes[local]
        return out

    def weights(self, pieces: Sequence[int]) -> list[int]:
        return self.sizes_of(pieces).tolist()

    def largest(self) -> int:
        return max(s.reader.largest() for s in self.source.sources)

    def path_lengths(self, files: Sequence[int]) -> np.ndarray:
        paths = np.empty(len(files), np.int64)
        for s, at, local in self.source.locate(np.asarray(files, dtype=np.int64)):
            paths[at] = self.source.sources[s].reader.path_lengths(local)
        return paths

    def part(self, pieces: Sequence[int], planning: plan_mod.Planning, *, epoch: int) -> MixedFilesPart:
        """The files `pieces` (places in the mixture's listing) packed to be read in another process: each
        source's share of them as arrays (`Manifest.subset`), no row made per file."""
        items = np.asarray(pieces, dtype=np.int64)
        sources = self.source.sources
        which = np.empty(len(items), np.min_scalar_type(len(sources)))
        listings = [src.manifest.subset([]) for src in sources]
        for s, at, local in self.source.locate(items):
            which[at] = s
            listings[s] = sources[s].manifest.subset(local)
        roots = [(src.manifest.root, src.local) for src in sources]
        return MixedFilesPart(roots, listings, which, list(pieces))


@dataclass(frozen=True)
class MixedFilesPart(Part):
    """Files of a mixture to read elsewhere: each source's share of them (its listing's arrays, in the part's
    order), which source each file comes from, and where each source's folder lies on the machine that listed
    it (a Ray worker may not share the driver's `AIR_VOLUMES_ROOT`)."""

    roots: list[tuple[str, str]]
    listings: list[Manifest]
    which: np.ndarray
    files: list[int]

    @property
    def rows(self) -> int:
        return len(self.files)

    @property
    def nbytes(self) -> int:
        return sum(int(m.sizes.sum()) for m in self.listings)

    @property
    def largest(self) -> int:
        return max(int(m.sizes.max(initial=0)) for m in self.listings)

    @property
    def input_files(self) -> list[str]:
        out = np.empty(len(self.files), object)  # each source's paths put in place in one step, not file by file
        for s, m in enumerate(self.listings):
            out[self.which == s] = list(map(f"{self.roots[s][0]}/".__add__, m.paths.tolist()))
        return out.tolist()

    def read(self, cache: Cache, *, fetch_threads: int = DEFAULT_FETCH_THREADS, prefetch: int = DEFAULT_PREFETCH,
             prefetch_bytes: int = DEFAULT_PREFETCH_BYTES, on_error: OnError = "raise",
             columns: Sequence[str] | None = None) -> Iterator[CachedFile | Skipped]:
        rows: list[Any] = [None] * len(self.files)  # (item, volume path, local path, size, mtime_ns), in order
        for s, m in enumerate(self.listings):
            volume_root, local_root = self.roots[s]
            at = np.flatnonzero(self.which == s).tolist()
            for k, (path, size, mtime) in zip(at, m.rows(range(len(m)))):
                rows[k] = (self.files[k], f"{volume_root}/{path}", f"{local_root}/{path}", size, mtime)
        return read_rows([rows[k:k + ROWS_AT_ONCE] for k in range(0, len(rows), ROWS_AT_ONCE)], cache,
                         fetch_threads=fetch_threads, prefetch=prefetch, prefetch_bytes=prefetch_bytes,
                         on_error=on_error)
