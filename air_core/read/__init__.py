"""Readers, one per data format: what a `Source` of that format is made of and how it is read.

`Source.reader` gives the reader of a source's mode; every front door plans
and reads through it and never asks which format it has. A format is one
module here, a `FileRowsReader` or `TableReader` subclass, named in
`FORMATS`. Its module is loaded when its mode is first asked for, so a Ray or
DataLoader worker that reads one format loads only that one. Records that
name media files (`media=`, or HF's folder convention) are read by their
format's reader wrapped in `media.MediaReader`, which fetches the media.
"""

from __future__ import annotations

from importlib import import_module

from ..io.files import DEFAULT_FETCH_THREADS, DEFAULT_PREFETCH, DEFAULT_PREFETCH_BYTES, ON_ERRORS, CachedFile, OnError, Skipped, default_fetch_threads, read_items, without_skips
from .reader import FileRowsReader, Part, Reader, TableReader

# mode -> "module:class" of its reader; mode="auto" tries them in this order.
FORMATS = {
    "files": "files:FilesReader",
    "pack": "pack:PackReader",
    "parquet": "parquet:ParquetReader",
    "json": "jsonl:JsonReader",
    "csv": "delimited:CsvReader",
    "text": "text:TextReader",
    "webdataset": "webdataset:WebDatasetReader",
}


# The file name endings mode="auto" knows each format by (a line format's with a compression's after them too), kept
# here rather than on the readers alone: auto tells a folder's format from its names without loading every reader's
# module (~12 ms of imports, more where no bytecode is cached) in each process that resolves a source.
AUTO_EXTENSIONS = {"parquet": ("parquet",), "json": ("jsonl", "ndjson"), "csv": ("csv", "tsv"), "webdataset": ("tar",)}
LINE_FORMATS = ("json", "csv", "text")
COMPRESSIONS = {"gz": "gzip", "zst": "zstd"}  # a line format's compressed files: read whole, decompressed as read


def auto_suffixes(mode: str) -> tuple[str, ...]:
    """The endings of the files that mode="auto" reads in `mode` (none: never chosen by names)."""
    plain = tuple(f".{e}" for e in AUTO_EXTENSIONS.get(mode, ()))
    if mode not in LINE_FORMATS:
        return plain
    return tuple(p + c for p in plain for c in ("", *(f".{z}" for z in COMPRESSIONS)))


def reader_class(mode: str) -> type[Reader]:
    """The reader of `mode` (a key of `FORMATS`), its module loaded on first use."""
    module, name = FORMATS[mode].split(":")
    return getattr(import_module(f"{__name__}.{module}"), name)


def readers() -> dict[str, type[Reader]]:
    """Every format's reader by mode, in the order mode="auto" tries them."""
    return {mode: reader_class(mode) for mode in FORMATS}


__all__ = [
    "AUTO_EXTENSIONS", "COMPRESSIONS", "DEFAULT_FETCH_THREADS", "DEFAULT_PREFETCH", "DEFAULT_PREFETCH_BYTES", "FORMATS",
    "LINE_FORMATS", "auto_suffixes", "FileRowsReader", "ON_ERRORS",
    "OnError", "Part", "Reader", "TableReader", "CachedFile", "Skipped", "default_fetch_threads", "read_items",
    "reader_class", "readers", "without_skips",
]
