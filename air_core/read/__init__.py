"""Readers, one per data format: what a `Source` of that format is made of and how it is read.

`Source.reader` gives the reader of a source's mode; every front door plans
and reads through it and never asks which format it has. A format is one
module here: a `FileRowsReader` or `TableReader` subclass registered with
`@register` (see `reader`).
"""

from .files import DEFAULT_FETCH_THREADS, DEFAULT_PREFETCH, DEFAULT_PREFETCH_BYTES, ON_ERRORS, CachedFile, FilesReader, OnError, Skipped, default_fetch_threads, read_items, without_skips
from .pack import PackReader
from .parquet import ParquetReader
from .reader import READERS, FileRowsReader, Part, Reader, TableReader, register
from .jsonl import JsonReader
from .delimited import CsvReader
from .text import TextReader
from .lines import LinesReader
from .webdataset import WebDatasetReader

__all__ = [
    "CsvReader", "DEFAULT_FETCH_THREADS", "DEFAULT_PREFETCH", "DEFAULT_PREFETCH_BYTES", "FileRowsReader", "FilesReader",
    "JsonReader", "LinesReader", "TextReader",
    "ON_ERRORS", "OnError", "PackReader", "ParquetReader", "Part", "READERS", "Reader", "TableReader", "CachedFile",
    "Skipped", "WebDatasetReader", "default_fetch_threads", "read_items", "register", "without_skips",
]
