"""Which columns of records name media files, and where each named path lies. Pure: names and paths in and out.

Two ways to say which columns are media: `media={"image": "image"}`
(`NamedMedia`: column -> kind, the column keeps its name), or Hugging
Face's folder convention (`FolderMedia`: a `metadata.jsonl`, `.csv` or
`.parquet` whose `file_name` / `<x>_file_name` column names one file and
`file_names` / `<x>_file_names` several, each column named as HF names it).
Either gives the same `MediaColumn`s, and the reading is one.

A named path is relative to its base folder (`media_dir=`, else the records
file's own folder) and must stay inside the volume: an absolute path, a URL,
or `..` past the volume's root is refused (`outside`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import OptionError

if TYPE_CHECKING:
    import pyarrow as pa

KINDS = ("image", "audio", "video", "file")
# Extensions by kind, as HF's imagefolder, audiofolder and videofolder read them (the common ones): the kind of
# a bare `file_name` column is the kind most of a folder's other files have.
EXTENSIONS = {
    "image": (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"),
    "audio": (".wav", ".mp3", ".flac", ".ogg", ".opus", ".m4a"),
    "video": (".mp4", ".avi", ".mov", ".mkv", ".webm"),
}
# HF's metadata file of each record format.
METADATA = {"jsonl": "json", "csv": "csv", "parquet": "parquet"}


@dataclass(frozen=True)
class MediaColumn:
    """A column of records that names media: `column` in the records, `name` in the rows, `kind` of its files
    ("image", "audio", "video" or "file"), and whether it holds a list of paths (`many`) or one."""

    column: str
    name: str
    kind: str
    many: bool


@dataclass(frozen=True)
class NamedMedia:
    """`media=`: columns -> kinds, as the user named them (each keeps its name)."""

    kinds: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, media: Mapping[str, str]) -> NamedMedia:
        """Checked `media=`: a non-empty mapping of column names to kinds.

        Raises:
            OptionError: it is not one, or names a kind there is not.
        """
        if not isinstance(media, Mapping) or not media or not all(isinstance(c, str) for c in media):
            raise OptionError(f"media={media!r}: give a dict of the records' columns that name media files and "
                              "their kinds, such as media={'image': 'image'}")
        for column, kind in media.items():
            if kind not in KINDS:
                raise OptionError(f"media={{{column!r}: {kind!r}}}: a column's kind is one of {KINDS}")
        return cls(tuple(media.items()))

    def columns(self, schema: pa.Schema) -> list[MediaColumn]:
        """The media columns of records of `schema`.

        Raises:
            OptionError: a column named is not among the records' columns, or holds neither paths nor lists.
        """
        missing = [c for c, _ in self.kinds if c not in schema.names]
        if missing:
            raise OptionError(f"media= names column {missing[0]!r}, which the records do not have: their columns "
                              f"are {schema.names}")
        return [MediaColumn(c, c, kind, _many(schema, c)) for c, kind in self.kinds]


@dataclass(frozen=True)
class FolderMedia:
    """HF's folder convention: the metadata's `file_name`-like columns, all of `kind` (the kind most of the folder's
    other files have, as HF's builder for that kind reads them), the bare ones named for it."""

    kind: str

    def columns(self, schema: pa.Schema) -> list[MediaColumn]:
        """The media columns of metadata of `schema`, named as HF names them.

        Raises:
            OptionError: no column names a file.
        """
        out = []
        for column in schema.names:
            if column in ("file_name", "file_names"):
                name = self.kind + ("s" if column == "file_names" else "")
            elif column.endswith(("_file_name", "_file_names")):
                name = column.rsplit("_file_name", 1)[0]
            else:
                continue
            out.append(MediaColumn(column, name, self.kind, _many(schema, column)))
        if not out:
            raise OptionError(f"the metadata's columns {schema.names} name no file: give one `file_name` (or "
                              "`<name>_file_name`) column of each record's file, or `file_names` for several, "
                              "as Hugging Face's folder datasets have it")
        return out


def _many(schema: pa.Schema, column: str) -> bool:
    import pyarrow.types as pt

    t = schema.field(column).type
    if pt.is_string(t) or pt.is_large_string(t) or pt.is_null(t):
        return False
    if (pt.is_list(t) or pt.is_large_list(t)) and (pt.is_string(t.value_type) or pt.is_large_string(t.value_type)
                                                  or pt.is_null(t.value_type)):
        return True
    raise OptionError(f"column {column!r} names media files, but holds {t}: give it a path (a string) per "
                      "record, or a list of paths")


def kind_of_files(counts: Mapping[str, int]) -> str:
    """The kind most files have, from counts of files by kind; "file" where none is of a kind."""
    kind, n = max(counts.items(), key=lambda kv: kv[1], default=("file", 0))
    return kind if n else "file"


def outside(base: str, named: str, volume: str) -> str | None:
    """Why `named`, a path relative to volume folder `base`, may not be read (None: it may): it is absolute, a
    URL, empty, or leaves `volume` (a volume's root, `/Volumes/c/s/v`)."""
    if not named:
        return "an empty path"
    if "://" in named or named.startswith("dbfs:"):
        return "a URL: name a file inside the volume, relative to the media folder"
    if named.startswith("/"):
        return "an absolute path: name it relative to the media folder (media_dir=)"
    joined = posixpath.normpath(f"{base}/{named}")
    if joined != volume and not joined.startswith(volume + "/"):
        return f"outside the volume {volume}: every medium must lie inside the records' volume"
    return None


def join(base: str, named: str) -> str:
    """The volume path of `named` (checked by `outside`) under volume folder `base`."""
    return posixpath.normpath(f"{base}/{named}")


__all__ = ["EXTENSIONS", "KINDS", "METADATA", "FolderMedia", "MediaColumn", "NamedMedia", "join", "kind_of_files",
           "outside"]
