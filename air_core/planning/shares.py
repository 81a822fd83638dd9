"""Which items one stream reads, in which order. Pure: numbers in, lists out.

Items are indices into a manifest; sizes are their weights (bytes, or rows for
tabular units). A plan is a function of (sizes, grid, epoch, `Planning`)
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
from dataclasses import dataclass
from functools import cached_property
from typing import Collection, Literal, Sequence

import numpy as np

from ..errors import OptionError
from ..grid import Grid

Balance = Literal["bytes", "stride"]
Equalize = Literal["none", "pad", "drop"]
BALANCES = ("bytes", "stride")
EQUALIZES = ("none", "pad", "drop")
KEY_CHUNK = 1 << 20  # a rank's keys are drawn this many of the epoch's at a time (8 MiB), never all at once


def epoch_order(n: int, *, epoch: int, seed: int, shuffle: bool) -> list[int]:
    """range(n), permuted by (seed, epoch) when shuffling: the same on every rank."""
    return epoch_order_array(n, epoch, seed, shuffle).tolist()


def snake(items: Sequence[int], sizes: Sequence[int], parts: int) -> list[list[int]]:
    """Deal `items` largest first to `parts` lists in snake order; each list keeps input order.

    Ties in size go by item, so the deal does not depend on the input order.
    """
    items = np.asarray(items, dtype=np.int64)
    by_item = _stable_argsort(items - items.min()) if len(items) else items
    part = np.empty(len(items), np.int32)
    part[by_item] = _snake(np.asarray(sizes, dtype=np.int64)[items[by_item]], parts)
    return [share.tolist() for share in _grouped(items, part, parts)]


@dataclass(frozen=True)
class Planning:
    """How a run deals and orders its items: the same in every stream of the run and in every epoch.

    A front door builds it once from its checked options; every planner takes it (the epoch apart, which changes
    every epoch).

    Attributes:
        seed: the shuffle's seed.
        shuffle: reorder each share every epoch, seeded by (seed, epoch): the same order on every rank.
        balance: "bytes" (largest first, in snake order) or "stride" (the reference's `files[gid::R*W]`).
        equalize: "none", or every rank as many items: "pad" repeats some, "drop" leaves some out.

    Raises:
        OptionError: for a `balance` or `equalize` that is none of the above.
    """

    seed: int = 0
    shuffle: bool = False
    balance: Balance = "bytes"
    equalize: Equalize = "none"

    def __post_init__(self) -> None:
        if self.balance not in BALANCES:
            raise OptionError(f"balance={self.balance!r}: choose one of {BALANCES}")
        if self.equalize not in EQUALIZES:
            raise OptionError(f"equalize={self.equalize!r}: choose one of {EQUALIZES}")


def rank_shares(
    sizes: Sequence[int],
    *,
    world_size: int,
    planning: Planning = Planning(),
    epoch: int = 0,
    exclude: Collection[int] = (),
) -> list[list[int]]:
    """Every rank's items for one epoch, in the order that rank reads them.

    `exclude` removes items (already delivered ones, on resume) before
    partitioning, so the remainder is balanced again.
    """
    deal = Deal(Epoch(sizes, epoch=epoch, planning=planning), world_size, excluded=_mask(len(sizes), exclude))
    return [share.tolist() for share in deal.shares()]


def rank_share(
    sizes: Sequence[int],
    *,
    rank: int,
    world_size: int,
    planning: Planning = Planning(),
    epoch: int = 0,
    by_size: np.ndarray | None = None,
) -> list[int]:
    """One rank's items for one epoch, in the order it reads them: `rank_shares(...)[rank]`, dealing no other's.

    `by_size`: `largest_first(sizes)`, when the listing carries it.
    """
    return plan_epoch(sizes, Grid(rank, world_size), planning=planning, epoch=epoch, by_size=by_size)


def worker_share(
    share: Sequence[int], sizes: Sequence[int], *, worker: int, num_workers: int, balance: Balance = "bytes"
) -> list[int]:
    """One DataLoader worker's part of its rank's share, in read order."""
    share = np.asarray(share, dtype=np.int64)
    parts = worker_parts(share, np.asarray(sizes, dtype=np.int64), num_workers, balance)
    return share[parts == worker].tolist()


def plan_epoch(
    sizes: Sequence[int],
    grid: Grid,
    *,
    planning: Planning = Planning(),
    epoch: int = 0,
    exclude: Collection[int] = (),
    by_size: np.ndarray | None = None,
) -> list[int]:
    """The items one stream (rank, worker) reads in `epoch`, in order.

    `by_size`: `largest_first(sizes)`, when the listing carries it.
    """
    listing = Epoch(sizes, epoch=epoch, planning=planning, by_size=by_size)
    deal = Deal(listing, grid.world_size, excluded=_mask(len(listing.sizes), exclude))
    share = deal.share(grid.rank)
    return share[worker_parts(share, listing.sizes, grid.num_workers, planning.balance) == grid.worker].tolist()


class Epoch:
    """The two orders of all items that every deal of one epoch follows, computed once, as arrays.

    A deal over part of the items (the rest of a resumed run) keeps them in
    these orders: filtering them costs a pass, sorting again a sort. The
    largest-first order does not depend on the epoch: a listing can carry it
    (`by_size`), computed once for every process that plans from it. One
    rank's share is put in read order by sorting its own items (`in_order`),
    not by sorting all of them.
    """

    def __init__(self, sizes: Sequence[int], *, epoch: int, planning: Planning,
                 by_size: np.ndarray | None = None) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.epoch, self.planning = epoch, planning
        if by_size is not None:
            self.by_size = by_size

    @cached_property
    def order(self) -> np.ndarray:
        """The items in the epoch's read order."""
        return epoch_order_array(len(self.sizes), self.epoch, self.planning.seed, self.planning.shuffle)

    @cached_property
    def by_size(self) -> np.ndarray:
        """The items largest first, ties by item: the order of the bytes deal."""
        return largest_first(self.sizes)

    def dealt_in(self, by_size: np.ndarray) -> Epoch:
        """This epoch with `by_size` as the bytes deal's order instead of largest first (a mixture's, which
        depends on the number of ranks), sharing its read order."""
        other = Epoch(self.sizes, epoch=self.epoch, planning=self.planning, by_size=by_size)
        if "order" in self.__dict__:
            other.order = self.order
        return other

    def in_order(self, items: np.ndarray) -> np.ndarray:
        """`items` (ascending) in the epoch's read order: as `order` holds them, without sorting it all."""
        if not self.planning.shuffle:
            return items
        keys = epoch_keys(len(self.sizes), self.epoch, self.planning.seed, items)
        keys.sort()
        keys &= np.uint64((1 << _item_bits(len(self.sizes))) - 1)
        return keys.view(np.int64)


class Deal:
    """One epoch's items dealt over `world_size` ranks, as arrays: what `rank_shares` returns as lists.

    It deals as the epoch's `Planning` says (balance, equalize). `excluded` is
    a boolean mask over the items (None: nothing excluded). Each rank's share
    is one pass over the order and every position's rank.
    """

    def __init__(self, epoch: Epoch, world_size: int, *, excluded: np.ndarray | None) -> None:
        balance, equalize = epoch.planning.balance, epoch.planning.equalize
        self.epoch, self.excluded = epoch, excluded
        if balance == "stride":
            # The reference's global id is worker * world + rank, so rank r holds order[r::world].
            self.rank_at = _cycle(np.arange(world_size, dtype=np.int32), len(self.order))
            self.counts = np.bincount(self.rank_at, minlength=world_size)
            items = len(self.order)
        else:
            # The snake deal gives the p-th largest item to lane p mod 2R, counted back from the end in the
            # second half: each rank's items are two strides of the largest-first order, found without
            # an array over every item (at 10**7 items, each is 40-80 MB in each of a node's 48 processes).
            self.by_size = _without(epoch.by_size, excluded)
            items = len(self.by_size)
            self.counts = np.array([_lane_count(world_size, rank, items) for rank in range(world_size)])
        self.world_size, self.equalize, self.balance = world_size, equalize, balance
        # A resume's remainder may be smaller than the grid: then, like any remainder, it is dropped.
        if equalize == "drop" and items and excluded is None and not self.counts.min():
            raise OptionError(
                f"equalize='drop' with {items} items over {world_size} ranks leaves every rank "
                "empty: use equalize='pad', or fewer ranks"
            )

    @cached_property
    def order(self) -> np.ndarray:
        """Every item dealt, in the epoch's read order."""
        return _without(self.epoch.order, self.excluded)

    def share(self, rank: int) -> np.ndarray:
        """One rank's items, in the order it reads them."""
        if self.balance == "stride":
            return self._equalized(self.order[self.rank_at == rank])
        mine = np.sort(self.by_size[_lane_positions(self.world_size, rank, len(self.by_size))])
        return self._equalized(self.epoch.in_order(mine))

    def shares(self) -> list[np.ndarray]:
        """Every rank's items, in the order each reads them."""
        if self.balance == "stride":
            return [self._equalized(s) for s in _grouped(self.order, self.rank_at, self.world_size)]
        return [self.share(rank) for rank in range(self.world_size)]

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
    part = np.empty(len(weights), np.int32)
    part[_stable_argsort(weights.max(initial=0) - weights)] = _snake_lanes(parts, len(weights))
    return part


def _snake_lanes(parts: int, n: int) -> np.ndarray:
    """The part of the 1st, 2nd, ... largest item: 0..parts-1, parts-1..0, ..."""
    lanes = np.arange(parts, dtype=np.int32)
    return _cycle(np.concatenate([lanes, lanes[::-1]]), n)


def _lane_positions(parts: int, part: int, n: int) -> np.ndarray:
    """The positions among n that `_snake_lanes(parts, n)` gives to `part`, ascending."""
    period = 2 * parts
    return np.sort(np.concatenate([np.arange(part, n, period), np.arange(period - 1 - part, n, period)]))


def _lane_count(parts: int, part: int, n: int) -> int:
    """How many of n positions `_snake_lanes(parts, n)` gives to `part`: two in each full round, and the rest."""
    rounds, rest = divmod(n, 2 * parts)
    return 2 * rounds + (part < rest) + (2 * parts - 1 - part < rest)


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


def largest_first(sizes: np.ndarray) -> np.ndarray:
    """The items largest first, ties by item (the order of the bytes deal; it does not change with the epoch)."""
    return _stable_argsort(sizes.max(initial=0) - sizes)


def epoch_order_array(n: int, epoch: int, seed: int, shuffle: bool) -> np.ndarray:
    """range(n) in the epoch's read order.

    The shuffle sorts the items by the raw output of a PCG64 seeded by (seed,
    epoch), whose stream NumPy keeps stable across versions
    (`Generator.permutation`'s may change): a resumed run plans the order it
    saved, whatever NumPy it runs on. The item sits in a key's low bits, so
    the keys are distinct, and one plain sort of them yields the items.
    """
    if not shuffle:
        return np.arange(n)
    keys = epoch_keys(n, epoch, seed)
    keys.sort()
    keys &= np.uint64((1 << _item_bits(n)) - 1)
    return keys.view(np.int64)


def epoch_keys(n: int, epoch: int, seed: int, items: np.ndarray | None = None, *,
               chunk: int = KEY_CHUNK) -> np.ndarray:
    """Each item's sort key of the epoch's shuffle: random high bits, the item in the low ones (distinct keys).

    `items` (ascending): the keys of these items alone, drawn `chunk` keys of
    the stream at a time, so a rank's keys cost no array over every item;
    they equal the same items' keys of the whole epoch, whatever `chunk`.
    """
    digest = hashlib.sha256(f"air:{seed}:{epoch}".encode()).digest()
    stream = np.random.PCG64(int.from_bytes(digest, "little"))
    if items is None:
        keys = stream.random_raw(n)
        items = np.arange(n, dtype=np.uint64)
    else:
        keys = np.empty(len(items), np.uint64)
        cuts = np.searchsorted(items, np.arange(0, n, chunk), side="left").tolist() + [len(items)]
        for k, lo in enumerate(range(0, n, chunk)):
            raw = stream.random_raw(min(chunk, n - lo))
            keys[cuts[k]:cuts[k + 1]] = raw[items[cuts[k]:cuts[k + 1]] - lo]
        items = items.astype(np.uint64)
    bits = _item_bits(n)
    keys >>= bits
    keys <<= bits
    keys |= items
    return keys


def _item_bits(n: int) -> int:
    return (n - 1).bit_length()


def _without(items: np.ndarray, excluded: np.ndarray | None) -> np.ndarray:
    """`items` but the excluded ones, in their order."""
    return items if excluded is None else items[~excluded[items]]


def _mask(n: int, items: Collection[int]) -> np.ndarray | None:
    """A boolean mask of the `items` among range(n); None when there are none."""
    if len(items) == 0:
        return None
    items = np.fromiter(items, np.int64, len(items)) if not isinstance(items, np.ndarray) else items
    mask = np.zeros(n, bool)
    mask[items[(items >= 0) & (items < n)]] = True
    return mask
