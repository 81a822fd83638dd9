"""Where each value of an uncompressed binary Parquet column sits in its file, read from the page headers.

A pack's readers read a packed file with one `pread` of the cached shard, as
they read a loose file, instead of decoding its row group: the writer records
each value's place once, by reading the footer and the column's page headers
(Thrift's compact protocol, as the Parquet format defines it) instead of
reading every byte again to find them.
"""

from __future__ import annotations

import os
from typing import Sequence


def value_offsets(path: str, column: str, sizes: Sequence[int]) -> list[int]:
    """Where each value of the binary `column` starts in the Parquet file `path`, from its footer and page headers.

    Uncompressed, PLAIN, without a dictionary, Parquet stores each value
    whole, after its length as 4 bytes, in order; a page header (and the
    page's definition levels) comes between pages. So walking the column's
    chunks page by page, reading only each page's header, places every
    value: `sizes` (the values' lengths, in row order) tell where one ends
    and the next begins. Each page must hold exactly its values, the first
    one after its length, and the pages exactly `sizes`: anything else
    (another writer, other options) is refused rather than recorded wrong.

    Raises:
        AssertionError: the column is not stored that way.
    """
    import pyarrow.parquet as pq

    md = pq.read_metadata(path)
    column = md.schema.names.index(column)
    out: list[int] = []
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        for g in range(md.num_row_groups):
            chunk = md.row_group(g).column(column)
            if chunk.compression != "UNCOMPRESSED" or chunk.has_dictionary_page:
                raise AssertionError(f"{path}: the values are not stored whole")
            at, end = chunk.data_page_offset, chunk.data_page_offset + chunk.total_compressed_size
            while at < end:
                values, stop, count = _page_values(fd, at)
                first = len(out)
                if count and (first + count > len(sizes) or
                              int.from_bytes(os.pread(fd, 4, values), "little") != sizes[first]):
                    raise AssertionError(f"{path}: a page of values is not laid out as expected")
                for size in sizes[first:first + count]:
                    out.append(values + 4)
                    values += 4 + int(size)
                if values != stop:
                    raise AssertionError(f"{path}: a page of values is not laid out as expected")
                at = stop
    if len(out) != len(sizes):
        raise AssertionError(f"{path} holds {len(out)} values, not {len(sizes)}")
    return out


_DATA_PAGE, _DATA_PAGE_V2, _PLAIN = 0, 3, 0


def _page_values(fd: int, at: int) -> tuple[int, int, int]:
    """(where its values start, where it ends, how many) of the data page whose header is at `at`.

    Reads the page header (Thrift compact protocol, as the Parquet format
    defines it) and, for a version 1 page, the length of its definition
    levels (of a nullable column), which precede the values.
    """
    head = os.pread(fd, 1024, at)
    try:
        header, size = _thrift_struct(head, 0)
    except IndexError:  # a longer header (page statistics): read as much as any writer puts there
        head = os.pread(fd, 16 << 20, at)
        header, size = _thrift_struct(head, 0)
    body, stop = at + size, at + size + header[3]
    if header[1] == _DATA_PAGE and header[5][2] == _PLAIN:  # DataPageHeader: num_values, encoding, ...
        levels = int.from_bytes(os.pread(fd, 4, body), "little")  # definition levels, after their length
        return body + 4 + levels, stop, header[5][1]
    if header[1] == _DATA_PAGE_V2 and header[8][4] == _PLAIN and not header[8][2]:  # ..., num_nulls, ...
        v2 = header[8]
        return body + v2[5] + v2.get(6, 0), stop, v2[1]  # after the definition and repetition levels
    raise AssertionError(f"a page of values that is not a PLAIN data page: {header}")


def _thrift_struct(buf: bytes, pos: int) -> tuple[dict, int]:
    """A struct in Thrift's compact protocol at `buf[pos:]`: ({field id: value}, where it ends).

    Integers and nested structs are decoded; other values are skipped over.
    """
    fields: dict = {}
    field = 0
    while True:
        byte = buf[pos]
        pos += 1
        if not byte:
            return fields, pos
        kind = byte & 0x0F
        if byte >> 4:
            field += byte >> 4
        else:
            field, pos = _zigzag(buf, pos)
        fields[field], pos = _thrift_value(buf, pos, kind)


def _thrift_value(buf: bytes, pos: int, kind: int) -> tuple[object, int]:
    if kind in (1, 2):  # a boolean field carries its value in its type
        return kind == 1, pos
    if kind == 3:
        return buf[pos], pos + 1
    if kind in (4, 5, 6):
        return _zigzag(buf, pos)
    if kind == 7:
        return None, pos + 8
    if kind == 8:
        n, pos = _varint(buf, pos)
        return None, pos + n
    if kind in (9, 10):  # list, set
        n, elem = buf[pos] >> 4, buf[pos] & 0x0F
        pos += 1
        if n == 15:
            n, pos = _varint(buf, pos)
        for _ in range(n):
            _, pos = (None, pos + 1) if elem in (1, 2) else _thrift_value(buf, pos, elem)  # a boolean: a byte
        return None, pos
    if kind == 11:  # map
        n, pos = _varint(buf, pos)
        if n:
            key, value = buf[pos] >> 4, buf[pos] & 0x0F
            pos += 1
            for _ in range(n):
                _, pos = _thrift_value(buf, pos, key)
                _, pos = _thrift_value(buf, pos, value)
        return None, pos
    if kind == 12:
        return _thrift_struct(buf, pos)
    raise ValueError(f"Thrift compact type {kind}")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        out |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return out, pos


def _zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = _varint(buf, pos)
    return (n >> 1) ^ -(n & 1), pos


__all__ = ["value_offsets"]
