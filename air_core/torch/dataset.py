"""UCVolumeDataset: the files of a volume folder as local cached paths, or a table's rows, one share per
(rank x worker)."""

from __future__ import annotations

import io
from typing import Any, Iterator, Literal, Mapping, Protocol, Sequence, runtime_checkable

import torch.utils.data

from ..doors import (DEFAULT_PREFETCH, DEFAULT_PREFETCH_BYTES, Balance, Equalize, FileStream, Manifest, OnError,
                     OptionError, RowStream, options, refuse_rows)

MODES = ("files", "rows")


@runtime_checkable
class Checkpointable(Protocol):
    """A dataset whose iteration progress can be saved and resumed."""

    def state_dict(self) -> dict[str, Any]:
        """A plain-data snapshot of iteration progress."""
        ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from a snapshot taken by `state_dict`."""
        ...


class PackedFile(io.BytesIO):
    """A file read from a pack: its bytes in memory, opened for reading; `name` is its volume path.

    Decoders that take a path or a file (`PIL.Image.open`, `torch.load`,
    `soundfile.read`) take it as they take the path of a loose file.
    """

    def __init__(self, data: bytes, name: str) -> None:
        super().__init__(data)
        self.name = name

    def __repr__(self) -> str:
        return f"PackedFile({self.name!r})"


class UCVolumeDataset(torch.utils.data.IterableDataset):
    """Streams the files under a Unity Catalog volume folder as local paths.

    Each file is copied on first access into the node-local cache (shared by
    every process on the machine, kept across runs) and yielded as the path of
    that copy. Every (rank, DataLoader worker) pair reads a disjoint share,
    balanced by bytes; together they read the folder exactly once per epoch.
    Each worker fetches its next files concurrently, ahead of the consumer.

    Wrap it to decode files into samples:

        class ImageDataset(torch.utils.data.IterableDataset):
            def __init__(self, files):
                self.files = files

            def __iter__(self):
                for path in self.files:
                    with PIL.Image.open(path) as image:
                        yield to_tensor(image.convert("RGB"))

        loader = DataLoader(ImageDataset(UCVolumeDataset("/Volumes/main/ml/raw/images")), batch_size=64)

    Over a pack (`air-data pack`), a packed file has no path of its own: each
    item is a `PackedFile`, an in-memory file named for the file's volume
    path, which the decoding above opens unchanged.

    `mode="rows"` yields a table's rows as dicts instead (Parquet, JSON Lines,
    CSV, text; see `air_core.RowStream`), of one folder or of a mixture of
    tables of one schema, `sources=` with each source's format as its dict's
    `mode` (default "auto"): every epoch holds exactly each source's count of
    rows. The DataLoader's resume then counts rows.

    A yielded path stays valid while it is in use: a full cache stops admitting
    files rather than evicting them (past it, files are read from the volume).
    Each pass over the dataset is the next epoch (it matters with `shuffle`);
    `set_epoch` picks one. The dataset is small when pickled, so every
    multiprocessing start method works (fork, forkserver, spawn).

    Args:
        path: a volume folder, `/Volumes/<catalog>/<schema>/<volume>/...` or
            `dbfs:/Volumes/...`; listed recursively (names starting with `.` or
            `_` are skipped).
        sources: instead of `path`, a mixture of several folders, each with its
            weight: every epoch holds each one's share exactly (see `air_core.FileStream`,
            and `air_core.RowStream` for rows).
        epoch_size: a mixture of proportions: items (files, or rows) per epoch (default: the
            sources' sizes added up).
        mode: "files" (default): each file's local path; "rows": a table's rows, as dicts.
        columns: rows mode: the columns to read (the others are not decoded, where the format allows).
        include: glob(s) of files to keep, relative to `path` (`*` crosses `/`).
        exclude: glob(s) of files to leave out.
        shuffle: reorder every share each epoch (seeded, the same on every rank).
        seed: the shuffle seed.
        balance: files mode: "bytes" (default) or "stride" (the order `files[i::ranks*workers]`).
        equalize: "none", "pad" or "drop": give every rank the same number of
            files, so that DDP ranks finish an epoch together.
        cache_dir: the node cache folder (default `$AIR_CACHE_DIR`, else
            `/local_disk0/...`, else a per-user temp folder).
        cache_limit: cap on the node cache's bytes, recorded in the cache for every process on the node;
            None: keep to the cap last recorded there, if any.
        verify: check each cached copy's bytes against their checksum on every hit, not only
            its length (see `air_core.FileStream`).
        fetch_threads: files read concurrently by each worker (default: 32 when there are
            several workers, else 64; see `air_core.doors.default_fetch_threads`).
        prefetch: files mode: most files fetched ahead of the consumer, per worker.
        prefetch_bytes: files mode: most bytes fetched ahead of the consumer, per worker.
        on_error: "raise" (default) or "skip": leave out, with a warning, a file that stays
            unreadable through every retry (see `air_core.FileStream`); in rows mode, a
            malformed record, or one that names a missing medium.
        media: rows mode: records that name media files, their columns that hold paths -> each
            one's kind ("image", "audio", "video", "file"; see `air_core.resolve_source`): each
            such column of a row holds the local path of its medium's cached copy (a list, for a
            list of paths), fetched ahead of the consumer. A folder in Hugging Face's layout
            (`metadata.jsonl` beside the media) is read so without it.
        media_dir: rows mode: the folder the media paths are relative to (a volume path, or
            relative to `path`); default: each records file's own folder.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        sources: Sequence[Mapping[str, Any]] | None = None,
        epoch_size: int | None = None,
        mode: Literal["files", "rows"] = "files",
        columns: Sequence[str] | None = None,
        include: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        balance: Balance = "bytes",
        equalize: Equalize = "none",
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        verify: bool = False,
        fetch_threads: int | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
        on_error: OnError = "raise",
        media: Mapping[str, str] | None = None,
        media_dir: str | None = None,
    ) -> None:
        super().__init__()
        options.choice("mode", mode, MODES)
        self._stream: FileStream | RowStream
        if mode == "rows":
            files_only = [f"{name}={value!r}" for name, value, default in (
                ("balance", balance, "bytes"), ("prefetch", prefetch, DEFAULT_PREFETCH),
                ("prefetch_bytes", prefetch_bytes, DEFAULT_PREFETCH_BYTES)) if value != default]
            if files_only:
                raise OptionError(f"{files_only[0]} is an option of files mode: rows mode deals a table's rows "
                                  "by bytes and fetches a stream's units ahead itself; leave it unset")
            self._stream = RowStream(
                path, sources=sources, epoch_size=epoch_size, include=include, exclude=exclude, columns=columns,
                shuffle=shuffle, seed=seed, equalize=equalize, cache_dir=cache_dir, cache_limit=cache_limit,
                verify=verify, fetch_threads=fetch_threads, on_error=on_error, media=media, media_dir=media_dir,
            )
        else:
            if media is not None or media_dir is not None:
                raise OptionError("media= and media_dir= read records that name media files, a row per record: "
                                  "give mode='rows'")
            if columns is not None:
                raise OptionError("columns= picks a table's columns: give mode='rows' to read its rows, or leave "
                                  "columns unset to read each file's path")
            refuse_rows(sources, rows_here="UCVolumeDataset(sources=[...], mode='rows')")
            self._stream = FileStream(
                path, sources=sources, epoch_size=epoch_size, include=include, exclude=exclude, shuffle=shuffle,
                seed=seed, balance=balance, equalize=equalize, cache_dir=cache_dir, cache_limit=cache_limit,
                verify=verify, fetch_threads=fetch_threads, prefetch=prefetch, prefetch_bytes=prefetch_bytes,
                on_error=on_error,
            )
        # Whether a pass has begun on this copy: the next pass is then the next epoch.
        self._ran = False

    @property
    def path(self) -> str:
        """The volume folder, as `/Volumes/c/s/v/...` (a mixture's folders, for messages)."""
        return self._stream.path

    @property
    def manifest(self) -> Manifest:
        """The listing every rank and worker plans from (files mode)."""
        if isinstance(self._stream, RowStream):
            raise OptionError("rows mode plans from its tables' units (row groups, spans), not a listing of files: "
                              "read a folder's listing with air_core.resolve_source(path).manifest")
        return self._stream.manifest

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass read `epoch` (its shuffle order)."""
        self._stream.set_epoch(epoch)
        self._ran = False

    def next_epoch(self) -> int:
        """The epoch the next pass over this copy of the dataset reads."""
        return self._stream.epoch + 1 if self._ran else self._stream.epoch

    def state_dict(self) -> dict[str, Any]:
        """This stream's progress: its epoch, grid and files (or rows) delivered (see `FileStream.state_dict`)."""
        return self._stream.state_dict()

    def _position(self) -> tuple[int, list[int], Any]:
        """`(epoch, grid, consumed)` of `state_dict()`, what the DataLoader tags each batch with."""
        return self._stream.position()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume at the next pass: from one stream's state, or a whole run's state on any grid."""
        self._stream.load_state_dict(state_dict)
        self._ran = False

    def __iter__(self) -> Iterator[str | PackedFile | dict[str, Any]]:
        if self._ran:
            self._stream.set_epoch(self._stream.epoch + 1)
        self._ran = True
        if isinstance(self._stream, RowStream):
            yield from self._stream
            return
        for f in self._stream:
            # A packed file has no path of its own: its bytes are in `data`.
            yield f.local_path or PackedFile(f.data, f.path)  # type: ignore[arg-type]
