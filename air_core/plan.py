"""Which items one stream reads, in which order. Pure: numbers in, lists out.

Items are indices into a manifest; sizes are their weights (bytes, or rows for
tabular units). A plan is a function of (sizes, grid, epoch, seed, options)
alone, so every rank and worker computes its share without talking to the
others, and the shares are disjoint and complete by construction.

Balancing ("bytes", the default): items sorted largest first are dealt to ranks
in snake order (0..R-1, R-1..0, ...). That keeps item counts within one of
each other and bytes within the largest item, so `equalize` costs at most one
item per rank. The same deal splits a rank's items across its workers. The
assignment depends on sizes alone, never on the epoch: each node's cache then
holds only its own share. Shuffling reorders the items inside each share.

"stride" reproduces the reference's `files[gid::R*W]`, gid = worker * R + rank,
over the epoch order.
"""

from __future__ import annotations

import random
from typing import Collection, Literal, Sequence

from .errors import OptionError
from .grid import Grid

Balance = Literal["bytes", "stride"]
Equalize = Literal["none", "pad", "drop"]
BALANCES = ("bytes", "stride")
EQUALIZES = ("none", "pad", "drop")


def epoch_order(n: int, *, epoch: int, seed: int, shuffle: bool) -> list[int]:
    """range(n), permuted by (seed, epoch) when shuffling: the same on every rank."""
    order = list(range(n))
    if shuffle:
        random.Random(f"air:{seed}:{epoch}").shuffle(order)
    return order


def snake(items: Sequence[int], sizes: Sequence[int], parts: int) -> list[list[int]]:
    """Deal `items` largest first to `parts` lists in snake order; each list keeps input order.

    Ties in size go by item, so the deal does not depend on the input order.
    """
    if parts == 1:  # one rank, or one worker: the sort would deal everything to it
        return [list(items)]
    n = len(items)
    weight = [sizes[i] for i in items]
    # Two sorts keyed by C-level getters (a stable descending sort keeps the item order of ties)
    # cost half of one keyed by a Python lambda: every DataLoader worker deals its rank's share each epoch.
    by_size = sorted(sorted(range(n), key=items.__getitem__), key=weight.__getitem__, reverse=True)
    period = 2 * parts
    lanes = [j if j < parts else period - 1 - j for j in range(period)] * (n // period + 1)
    part_of = [0] * n
    for k, lane in zip(by_size, lanes):
        part_of[k] = lane
    out: list[list[int]] = [[] for _ in range(parts)]
    for lane, item in zip(part_of, items):
        out[lane].append(item)
    return out


def _stride_ranks(order: Sequence[int], world: int) -> list[list[int]]:
    # The reference's global id is worker * world + rank, so rank r holds order[r::world].
    return [list(order[r::world]) for r in range(world)]


def _equalize(shares: list[list[int]], order: Sequence[int], how: str) -> list[list[int]]:
    counts = [len(s) for s in shares]
    if how == "none" or min(counts) == max(counts):
        return shares
    if how == "drop":
        return [s[: min(counts)] for s in shares]
    target = max(counts)
    out = []
    for s in shares:
        source = s or list(order)  # a rank with nothing repeats items from the whole order
        out.append(s + [source[k % len(source)] for k in range(target - len(s))])
    return out


def rank_shares(
    sizes: Sequence[int],
    *,
    world_size: int,
    epoch: int = 0,
    seed: int = 0,
    shuffle: bool = False,
    balance: Balance = "bytes",
    equalize: Equalize = "none",
    exclude: Collection[int] = (),
) -> list[list[int]]:
    """Every rank's items for one epoch, in the order that rank reads them.

    `exclude` removes items (already delivered ones, on resume) before
    partitioning, so the remainder is balanced again.
    """
    if balance not in BALANCES:
        raise OptionError(f"balance={balance!r}: choose one of {BALANCES}")
    if equalize not in EQUALIZES:
        raise OptionError(f"equalize={equalize!r}: choose one of {EQUALIZES}")
    order = epoch_order(len(sizes), epoch=epoch, seed=seed, shuffle=shuffle)
    if exclude:
        skip = set(exclude)
        order = [i for i in order if i not in skip]
    if balance == "stride":
        shares = _stride_ranks(order, world_size)
    else:
        shares = snake(order, sizes, world_size)
    # A resume's remainder may be smaller than the grid: then, like any remainder, it is dropped.
    if equalize == "drop" and order and not exclude and not min(map(len, shares)):
        raise OptionError(
            f"equalize='drop' with {len(order)} items over {world_size} ranks leaves every rank "
            "empty: use equalize='pad', or fewer ranks"
        )
    return _equalize(shares, order, equalize)


def worker_share(
    share: Sequence[int], sizes: Sequence[int], *, worker: int, num_workers: int, balance: Balance = "bytes"
) -> list[int]:
    """One DataLoader worker's part of its rank's share, in read order."""
    if num_workers == 1:
        return list(share)
    if balance == "stride":
        return list(share[worker::num_workers])
    # Positions, not items: a padded share may hold an item twice.
    positions = snake(list(range(len(share))), [sizes[i] for i in share], num_workers)[worker]
    return [share[p] for p in positions]


def plan(
    sizes: Sequence[int],
    grid: Grid,
    *,
    epoch: int = 0,
    seed: int = 0,
    shuffle: bool = False,
    balance: Balance = "bytes",
    equalize: Equalize = "none",
    exclude: Collection[int] = (),
) -> list[int]:
    """The items one stream (rank, worker) reads in `epoch`, in order."""
    shares = rank_shares(
        sizes, world_size=grid.world_size, epoch=epoch, seed=seed,
        shuffle=shuffle, balance=balance, equalize=equalize, exclude=exclude,
    )
    return worker_share(shares[grid.rank], sizes, worker=grid.worker, num_workers=grid.num_workers,
                        balance=balance)
