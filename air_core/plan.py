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

The work is done on numpy arrays: at 10**7 items a plan costs a few sorts of
the listing, and only the asked stream's items become Python ints. `sizes` may
be any sequence of ints or an int64 array.
"""

from __future__ import annotations

import hashlib
from typing import Collection, Literal, Sequence

import numpy as np

from .errors import OptionError
from .grid import Grid

Balance = Literal["bytes", "stride"]
Equalize = Literal["none", "pad", "drop"]
BALANCES = ("bytes", "stride")
EQUALIZES = ("none", "pad", "drop")


def epoch_order(n: int, *, epoch: int, seed: int, shuffle: bool) -> list[int]:
    """range(n), permuted by (seed, epoch) when shuffling: the same on every rank."""
    return _in_order(np.arange(n), _order_keys(n, epoch, seed, shuffle)).tolist()


def snake(items: Sequence[int], sizes: Sequence[int], parts: int) -> list[list[int]]:
    """Deal `items` largest first to `parts` lists in snake order; each list keeps input order.

    Ties in size go by item, so the deal does not depend on the input order.
    """
    items = np.asarray(items, dtype=np.int64)
    by_item = _stable_argsort(items - items.min()) if len(items) else items
    part = np.empty(len(items), np.int32)
    part[by_item] = _snake(np.asarray(sizes, dtype=np.int64)[items[by_item]], parts)
    return [share.tolist() for share in _grouped(items, part, parts)]


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
    sizes = np.asarray(sizes, dtype=np.int64)
    deal = Deal(sizes, world_size, epoch=epoch, seed=seed, shuffle=shuffle, balance=balance, equalize=equalize,
                excluded=_mask(len(sizes), exclude))
    return [share.tolist() for share in deal.shares()]


def worker_share(
    share: Sequence[int], sizes: Sequence[int], *, worker: int, num_workers: int, balance: Balance = "bytes"
) -> list[int]:
    """One DataLoader worker's part of its rank's share, in read order."""
    share = np.asarray(share, dtype=np.int64)
    parts = worker_parts(share, np.asarray(sizes, dtype=np.int64), num_workers, balance)
    return share[parts == worker].tolist()


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
    sizes = np.asarray(sizes, dtype=np.int64)
    deal = Deal(sizes, grid.world_size, epoch=epoch, seed=seed, shuffle=shuffle, balance=balance,
                equalize=equalize, excluded=_mask(len(sizes), exclude))
    share = deal.share(grid.rank)
    return share[worker_parts(share, sizes, grid.num_workers, balance) == grid.worker].tolist()


class Deal:
    """One epoch's items dealt over `world_size` ranks, as arrays: what `rank_shares` returns as lists.

    `excluded` is a boolean mask over the items (None: nothing excluded). The
    epoch order and each position's rank are computed once; a rank's share is
    then one pass over them.
    """

    def __init__(
        self, sizes: np.ndarray, world_size: int, *, epoch: int, seed: int, shuffle: bool, balance: Balance,
        equalize: Equalize, excluded: np.ndarray | None,
    ) -> None:
        if balance not in BALANCES:
            raise OptionError(f"balance={balance!r}: choose one of {BALANCES}")
        if equalize not in EQUALIZES:
            raise OptionError(f"equalize={equalize!r}: choose one of {EQUALIZES}")
        present = np.arange(len(sizes)) if excluded is None else np.flatnonzero(~excluded)
        self.order = _in_order(present, _order_keys(len(sizes), epoch, seed, shuffle))
        if balance == "stride":
            # The reference's global id is worker * world + rank, so rank r holds order[r::world].
            self.rank_at = _cycle(np.arange(world_size, dtype=np.int32), len(self.order))
        else:
            ranks = _snake(sizes if excluded is None else sizes[present], world_size)  # in item order: ties by item
            if shuffle and excluded is not None:
                by_item = np.empty(len(sizes), np.int32)
                by_item[present] = ranks
                ranks = by_item
            self.rank_at = ranks[self.order] if shuffle else ranks
        self.world_size, self.equalize = world_size, equalize
        self.counts = np.bincount(self.rank_at, minlength=world_size)
        # A resume's remainder may be smaller than the grid: then, like any remainder, it is dropped.
        if equalize == "drop" and len(self.order) and excluded is None and not self.counts.min():
            raise OptionError(
                f"equalize='drop' with {len(self.order)} items over {world_size} ranks leaves every rank "
                "empty: use equalize='pad', or fewer ranks"
            )

    def share(self, rank: int) -> np.ndarray:
        """One rank's items, in the order it reads them."""
        return self._equalized(self.order[self.rank_at == rank])

    def shares(self) -> list[np.ndarray]:
        """Every rank's items, in the order each reads them."""
        return [self._equalized(s) for s in _grouped(self.order, self.rank_at, self.world_size)]

    def _equalized(self, share: np.ndarray) -> np.ndarray:
        low, high = int(self.counts.min()), int(self.counts.max())
        if self.equalize == "none" or low == high:
            return share
        if self.equalize == "drop":
            return share[:low]
        source = share if len(share) else self.order  # a rank with nothing repeats items from the whole order
        return np.concatenate([share, _cycle(source, high - len(share))])


def worker_parts(share: np.ndarray, sizes: np.ndarray, num_workers: int, balance: Balance) -> np.ndarray:
    """The worker each position of a rank's share goes to.

    Positions, not items: a padded share may hold an item twice.
    """
    if balance == "stride":
        return _cycle(np.arange(num_workers, dtype=np.int32), len(share))
    return _snake(sizes[share], num_workers)


def _snake(weights: np.ndarray, parts: int) -> np.ndarray:
    """The part each position goes to, dealt largest first in snake order, ties by position."""
    if parts == 1:  # one rank, or one worker: the sort would deal everything to it
        return np.zeros(len(weights), np.int32)
    lanes = np.arange(parts, dtype=np.int32)
    part = np.empty(len(weights), np.int32)
    if len(weights):
        part[_stable_argsort(weights.max() - weights)] = _cycle(np.concatenate([lanes, lanes[::-1]]), len(weights))
    return part


def _cycle(pattern: np.ndarray, n: int) -> np.ndarray:
    """`pattern` repeated to length n (`np.resize`, which is slow for a short pattern and a long n)."""
    return np.tile(pattern, -(-n // len(pattern)) if n else 0)[:n]


def _stable_argsort(keys: np.ndarray) -> np.ndarray:
    """`np.argsort(keys, kind="stable")` for non-negative int64 keys, which it may overwrite."""
    n = len(keys)
    bits = (n - 1).bit_length()
    if not n or int(keys.max()) >= 1 << (63 - bits):
        return np.argsort(keys, kind="stable")
    # (key, position) packed in one int64: a plain sort of values, several times faster than a stable argsort.
    # In place: at 10**7 items every copy is 80 MB in each of a node's 48 planning processes.
    keys <<= bits
    keys |= np.arange(n)
    keys.sort()
    keys &= (1 << bits) - 1
    return keys


def _grouped(values: np.ndarray, group: np.ndarray, groups: int) -> list[np.ndarray]:
    """values split by group number (0..groups-1), each group in input order."""
    ends = np.cumsum(np.bincount(group, minlength=groups))
    # In 8 or 16 bits, numpy's stable sort is a radix sort: one pass over the items.
    return np.split(values[np.argsort(group.astype(np.min_scalar_type(groups)), kind="stable")], ends[:-1])


def _order_keys(n: int, epoch: int, seed: int, shuffle: bool) -> np.ndarray | None:
    """Each item's sort key in the epoch's order, or None for the listing's order.

    The keys are the raw output of a PCG64 seeded by (seed, epoch), whose
    stream NumPy keeps stable across versions (`Generator.permutation`'s may
    change): a resumed run plans the order it saved, whatever NumPy it runs
    on. The item sits in a key's low bits, so the keys are distinct and
    sorting them is a uniform shuffle.
    """
    if not shuffle:
        return None
    digest = hashlib.sha256(f"air:{seed}:{epoch}".encode()).digest()
    keys = np.random.PCG64(int.from_bytes(digest, "little")).random_raw(n)
    bits = (n - 1).bit_length()
    keys >>= bits
    keys <<= bits
    keys |= np.arange(n, dtype=np.uint64)
    return keys


def _in_order(items: np.ndarray, keys: np.ndarray | None) -> np.ndarray:
    """`items` (ascending) in the epoch's order: sorted by their keys, which it may overwrite."""
    if keys is None:
        return items
    ordered = keys[items] if len(items) < len(keys) else keys  # all the items: sort their keys in place
    ordered.sort()
    ordered &= np.uint64((1 << (len(keys) - 1).bit_length()) - 1)
    return ordered.view(np.int64)


def _mask(n: int, items: Collection[int]) -> np.ndarray | None:
    """A boolean mask of the `items` among range(n); None when there are none."""
    if len(items) == 0:
        return None
    items = np.fromiter(items, np.int64, len(items)) if not isinstance(items, np.ndarray) else items
    mask = np.zeros(n, bool)
    mask[items[(items >= 0) & (items < n)]] = True
    return mask
