"""What a saved stream position belongs to, and what differs in the stream it is offered to.

A `datasets.IterableDataset` state is a count of examples per shard and
per pipeline step: offered to another stream, it reads on from the same
counts in other data, silently. So a position is saved with the stream's
identity, and refused where that differs: the data (the folder, the
listing's fingerprint, every option that changes which rows come in which
order), the shards this rank reads (how many, and what they hold), and the
steps built on the data (`map`, `filter`, `shuffle` with its seed, ...).
Options that change only how rows are read (the node cache, fetch threads)
are left out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Iterator

import datasets

from .examples import Tables

# uc-volume options that change how rows are read, not which rows come in which order: the shard count they
# give (world_size, num_workers) is compared as the shards themselves.
_READ_ONLY = {"node_cache_dir", "node_cache_limit", "verify", "fetch_threads", "world_size", "num_workers",
              "name", "version", "data_files", "description"}


# What a facet's change means, where its name does not say.
_MEANING = {"listing": " (files were added, removed or changed in the folder)",
            "contents": " (the shards hold other pieces: another listing, options or version)",
            "pipeline": " (other steps built on the data: map, filter, shuffle, ...)"}


def describe(dataset: datasets.IterableDataset) -> dict[str, Any]:
    """The identity of `dataset` as this process reads it: a flat dict of named facets, as JSON values."""
    root = dataset._ex_iterable
    facets: dict[str, Any] = {"pipeline": _pipeline(root)}
    sources = [node for node in _nodes(root) if isinstance(node, Tables)]
    if not sources:
        facets.update({"dataset": dataset.info.builder_name, "config": dataset.info.config_name,
                       "shards": root.num_shards})
    for k, tables in enumerate(sources):
        label = f"source {k + 1} " if len(sources) > 1 else ""
        facets.update({label + name: value for name, value in _source(tables).items()})
    return json.loads(json.dumps(facets))  # as a saved one reads back: lists, not tuples


def differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each facet that differs, as "name: saved then, now now (what that means)"."""
    return [f"{name}: {_shown(saved.get(name))} then, {_shown(now.get(name))} now{_MEANING.get(name.split()[-1], '')}"
            for name in dict.fromkeys([*saved, *now]) if saved.get(name) != now.get(name)]


def _source(tables: Tables) -> dict[str, Any]:
    builder = tables.builder
    config = builder.config
    options = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in _READ_ONLY}
    shards = tables.kwargs["shards"]
    return {**options, "listing": builder._source.fingerprint, "shards": len(shards),
            "shard contents": _digest(repr(shards))}


def _nodes(node: Any) -> Iterator[Any]:
    yield node
    for child in _children(node):
        yield from _nodes(child)


def _children(node: Any) -> list:
    return [node.ex_iterable] if hasattr(node, "ex_iterable") else list(getattr(node, "ex_iterables", ()))


def _pipeline(node: Any) -> str:
    """The steps over the data, innermost last, with the seed of each step that draws (its generator's state)."""
    name = type(node).__name__
    generator = getattr(node, "generator", None)
    if generator is not None:
        name += f"[{_digest(json.dumps(generator.bit_generator.state, sort_keys=True))}]"
    children = _children(node)
    return f"{name}({', '.join(map(_pipeline, children))})" if children else name


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _shown(value: Any) -> str:
    return "none" if value is None else repr(value)
