"""Which node reads which part of a dataset, so that each node's cache keeps serving it. Pure.

A node cache only pays when the same files are read on the same node every
execution. The data is cut into *buckets* that depend on the listing alone
(never on the cluster, the epoch or the shuffle), and buckets go to nodes by
rendezvous hashing: every (bucket, node) pair gets a pseudo-random score, and
a bucket goes to its best-scoring node. Scores do not depend on which other
nodes exist, so when a node leaves only its buckets move, and a node that
joins takes only the buckets it now scores best on.

Plain rendezvous hashing leaves loads as uneven as coin flips. Each node is
therefore capped at its CPU share of the bytes plus one bucket, and pairs
are granted best score first (consistent hashing with bounded loads,
Mirrokni, Thorup and Zadimoghaddam, SODA 2018): a node then holds its share
within one bucket, and a change of nodes moves little more than its own buckets.
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

import numpy as np

from air_core.doors import snake

# Buckets are the unit of placement and of the balance guarantee (a node holds
# its share within one bucket); a node's buckets are then dealt into its read
# tasks, so they can be much smaller than a task. This many keep placement
# cheap (buckets x nodes scores) and a node's excess near 1/1024 of the data.
MAX_BUCKETS = 1024


def bucket_count(items: int) -> int:
    """How many buckets to cut `items` items into: one per item, up to `MAX_BUCKETS`."""
    return min(MAX_BUCKETS, items)


def buckets(weights: Sequence[int], count: int) -> np.ndarray:
    """The bucket of each item: `count` weight-balanced buckets, dealt as `air_core.doors.snake` deals ranks."""
    out = np.zeros(len(weights), np.int64)
    for b, group in enumerate(snake(range(len(weights)), weights, count) if count > 1 else ()):
        out[group] = b
    return out


def score(key: str, node: str) -> int:
    """The rendezvous score of `key` on `node`: the same on every process and every run."""
    return int.from_bytes(hashlib.blake2b(f"{key}\0{node}".encode(), digest_size=8).digest(), "big")


def place(weights: Sequence[int], nodes: Mapping[str, float]) -> list[str]:
    """The node of each bucket, by rendezvous hashing with loads bounded by each node's share.

    Args:
        weights: each bucket's bytes; bucket k's key is k.
        nodes: node id -> its weight (CPUs); only nodes of positive weight get buckets.

    Each node gets at most `weight / total weight` of the bytes plus the
    largest bucket, so every node holds its share within one bucket.
    """
    live = {n: w for n, w in nodes.items() if w > 0}
    if not live:
        raise ValueError("no node with CPUs to read on")
    total, whole = sum(weights), sum(live.values())
    room = {n: total * w / whole + max(weights, default=0) for n, w in live.items()}
    pairs = sorted(((score(str(k), n), k, n) for k in range(len(weights)) for n in live), reverse=True)
    out: list[str | None] = [None] * len(weights)
    for _, k, n in pairs:
        if out[k] is None and weights[k] <= room[n]:
            out[k] = n
            room[n] -= weights[k]
    return out  # type: ignore[return-value]  # room sums to more than the total: every bucket fits
