"""Table columns of media bytes as HF's media features: a reader's `media()` names them (see `TableReader.media`)."""

from __future__ import annotations

from typing import Mapping

import datasets
import pyarrow as pa

FEATURES = {"image": datasets.Image}


def features(features: datasets.Features, media: Mapping[str, str]) -> datasets.Features:
    """`features`, each column of `media` given its kind's feature (`datasets.Image()`)."""
    for name, kind in media.items():
        if name in features:
            features[name] = FEATURES[kind]()
    return features


def table(table: pa.Table, media: Mapping[str, str]) -> pa.Table:
    """`table`, each column of `media` (bytes) as its feature's storage: struct<bytes, path>, the path left null
    (the bytes are the file: it has no path of its own)."""
    for name in media:
        if name not in table.column_names:
            continue
        i = table.column_names.index(name)
        chunks = [_struct(c.cast(pa.binary()) if c.type != pa.binary() else c) for c in table.column(i).chunks]
        table = table.set_column(i, name, pa.chunked_array(chunks, type=_STORAGE))
    return table


_STORAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _struct(data: pa.Array) -> pa.Array:
    return pa.StructArray.from_arrays([data, pa.nulls(len(data), pa.string())], fields=list(_STORAGE),
                                      mask=data.is_null())
