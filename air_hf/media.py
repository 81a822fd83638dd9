"""Columns of media as HF's media features: a reader's `media()` names them (see `TableReader.media`).

A column of bytes (a WebDataset member) is the file itself; a column of
strings (records that name media, `air_core.read.media`) holds the local path
of each medium's cached copy, or, as a list, of several. Either becomes the
feature's storage, `struct<bytes, path>`, which HF decodes where the row is
consumed (`decode=False` gives it as it is). A medium of kind "file" stays
a path.
"""

from __future__ import annotations

from typing import Mapping

import datasets
import pyarrow as pa
import pyarrow.types as pt

from air_core.read.media import contents as media_contents

FEATURES = {"image": datasets.Image, "audio": datasets.Audio, "video": datasets.Video}


def features(features: datasets.Features, media: Mapping[str, str]) -> datasets.Features:
    """`features`, each column of `media` of a kind HF has a feature for given that feature (a list of them,
    for a column of lists)."""
    for name, kind in media.items():
        if name in features and kind in FEATURES:
            many = isinstance(features[name], (datasets.List, datasets.LargeList))
            features[name] = datasets.List(FEATURES[kind]()) if many else FEATURES[kind]()
    return features


def featured(features: datasets.Features, media: Mapping[str, str]) -> dict[str, str]:
    """The columns of `media` whose features are HF's media features (or lists of one): those `table` gives the
    feature's storage. A column given another feature (`Value("string")`) keeps its path."""
    kinds = tuple(FEATURES.values())
    out = {}
    for name, kind in media.items():
        feature = features.get(name)
        if isinstance(feature, (datasets.List, datasets.LargeList)):
            feature = feature.feature
        if isinstance(feature, kinds):
            out[name] = kind
    return out


def table(table: pa.Table, media: Mapping[str, str], *, embed: bool = False) -> pa.Table:
    """`table`, each column of `media` of a kind HF has a feature for as that feature's storage:
    struct<bytes, path>, from bytes (the path left null: the bytes are the file) or from a local path (the bytes
    left null: HF reads the file when it decodes), or a list of such structs from a list of paths.

    `embed`: the rows are bound for datasets' Arrow cache, which outlives the node cache: a path's bytes are
    read into the row."""
    for name, kind in media.items():
        if name not in table.column_names or kind not in FEATURES:
            continue
        i = table.column_names.index(name)
        column = table.column(i)
        if pt.is_list(column.type):
            chunks = [_listed(c, embed) for c in column.chunks]
            table = table.set_column(i, name, pa.chunked_array(chunks, type=pa.list_(_STORAGE)))
        else:
            chunks = [_struct(c, embed) for c in column.chunks]
            table = table.set_column(i, name, pa.chunked_array(chunks, type=_STORAGE))
    return table


_STORAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _struct(data: pa.Array, embed: bool) -> pa.Array:
    """Bytes, or paths (with `embed`, their files' bytes too), as the storage of a media feature."""
    if pt.is_string(data.type) or pt.is_large_string(data.type):
        contents = media_contents(data.to_pylist()) if embed else pa.nulls(len(data), pa.binary())
        arrays = [contents, data.cast(pa.string())]
    else:
        arrays = [data.cast(pa.binary()), pa.nulls(len(data), pa.string())]
    return pa.StructArray.from_arrays(arrays, fields=list(_STORAGE), mask=data.is_null())


def _listed(data: pa.ListArray, embed: bool) -> pa.Array:
    """Lists of paths as lists of a media feature's storage."""
    return pa.ListArray.from_arrays(data.offsets, _struct(data.values, embed),  # the offsets index `values`
                                    mask=data.is_null())
