"""Mixtures: which items of each source one epoch holds, and on which rank each is read. Pure: numbers in, arrays out.

A mixture gives every source one kind of weight (as mosaic-streaming's
`Stream` does): a `proportion` of each epoch of `epoch_size` items (default:
the sources' sizes added up; proportions are relative, normalised to sum 1),
a `repeat` (its items, times this, per epoch; fractions allowed) or a
`choose` (this many of its items per epoch). Source *i* then holds exactly
*kᵢ* items every epoch, the quotas rounded by largest remainder so that they
add up to the epoch's size.

Which items: a source of *n* items holding *k = q·n + r* (r < n) holds all
of its items q times, and r items walked from an endless sequence of passes,
each a permutation of its items (pass 0, pass 1, ...): epoch e takes positions
[e·r, (e+1)·r) of it. So every item is taken once before any is taken again,
across epochs, and any epoch's items are computed from (seed, epoch) in closed
form, without replaying the epochs before it: a resume is counts (`_Passes`).
An epoch whose r items straddle two passes holds no item twice: the next
pass's first items are the first of its seeded permutation that the epoch has
not taken, the ones it has are deferred to after the epoch's cut.

Items are numbered over the sources laid end to end (source *i*'s item j is
`offsets[i] + j`): the mixture's listing. The epoch's items (`Epoch.items`,
with repeats) are its *slots*, dealt over ranks and workers by
`air_core.planning.shares` like any listing's items, in the order
`Epoch.deal_order` gives for the number of ranks: each slot goes to its
item's home rank, the rank today's bytes deal gives that item in the
mixture's whole listing (sizes alone, no epoch), so an item taken in several
epochs is read on the same rank each time and its node's cache keeps serving
it. Only to even out the counts (which the deal keeps within one per rank,
so `equalize` costs at most one item) are the excess slots of a rank that
drew more than its share moved to ranks that drew fewer: about √(k/R) slots
per rank. A rank's bytes are then its share of each source's (balanced by
that source's deal) up to the chance of which items an epoch draws: ranks'
bytes differ by a per cent or two (2,000 to 100,000 items over 4 to 8
ranks), against ~0 for a deal by size alone, which would move most items
between ranks from one epoch to the next. A source read whole every epoch
(`repeat` a whole number) is balanced as one folder is.

A mixture of tables counts rows: `row_ranges` walks a source's units (row
groups, spans) the same way, each unit's rows in order, and gives an epoch's
rows as ranges of units (`air_core.mixed_table` deals them).
"""

from __future__ import annotations

import hashlib
import math
import numbers
from fractions import Fraction
from functools import cached_property
from typing import Literal, Sequence

import numpy as np

from ..errors import OptionError
from .shares import _lane_count, _snake_lanes, largest_first

Weight = Literal["proportion", "repeat", "choose"]
WEIGHTS = ("proportion", "repeat", "choose")
_BLOCK = 1 << 20


def source_counts(sizes: Sequence[int], kind: Weight, weights: Sequence[float], *, epoch_size: int | None = None,
                  names: Sequence[str] | None = None) -> list[int]:
    """How many items each source holds per epoch: the quotas `kind` and `weights` ask, by largest remainder.

    `names` name the sources in errors (default: "source 0", "source 1", ...).

    Raises:
        OptionError: a weight that is not a finite number >= 0 (`choose`: a whole
            number), weights all zero or an epoch of no items, an empty source, `epoch_size` with
            `repeat` or `choose`, or one that is not a whole number >= 1.
    """
    names = list(names) if names is not None else [f"source {i}" for i in range(len(sizes))]
    if not len(sizes):
        raise OptionError("sources=[]: give at least one source, a dict with its 'path' and its weight")
    if kind not in WEIGHTS:
        raise OptionError(f"weight kind {kind!r}: choose one of {WEIGHTS}")
    for name, n in zip(names, sizes):
        if n < 1:
            raise OptionError(f"{name} holds no items: a source of a mixture must hold some")
    exact = [_weight(kind, w, name) for w, name in zip(weights, names)]
    if not any(exact):
        raise OptionError(f"every source's {kind} is 0: give at least one source a {kind} above 0")
    if kind == "proportion":
        if epoch_size is None:
            epoch_size = int(sum(sizes))
        elif not isinstance(epoch_size, int) or isinstance(epoch_size, bool) or epoch_size < 1:
            raise OptionError(f"epoch_size={epoch_size!r}: give a whole number of items >= 1, or None for the "
                              "sources' sizes added up")
        total = sum(exact)
        quotas = [Fraction(epoch_size) * w / total for w in exact]
    else:
        if epoch_size is not None:
            raise OptionError(f"epoch_size={epoch_size!r} goes with 'proportion': with {kind!r} each source's weight "
                              "says how many items it gives an epoch; leave epoch_size unset")
        quotas = [w * n if kind == "repeat" else w for w, n in zip(exact, sizes)]
        epoch_size = math.floor(sum(quotas) + Fraction(1, 2))
        if not epoch_size:
            raise OptionError(f"{kind}={[float(w) for w in exact]} of {list(sizes)} items rounds to an epoch of no "
                              f"items: give larger weights")
    return _largest_remainder(quotas, epoch_size)


def _weight(kind: Weight, value: object, name: str) -> Fraction:
    """A weight as an exact fraction (its decimal form, so 0.1 is a tenth), checked."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise OptionError(f"{name}: {kind}={value!r}: give a finite number >= 0")
    if kind == "choose" and value != int(value):
        raise OptionError(f"{name}: choose={value!r}: give a whole number of items")
    return Fraction(int(value)) if isinstance(value, numbers.Integral) else Fraction(str(float(value)))


def _largest_remainder(quotas: Sequence[Fraction], total: int) -> list[int]:
    """Whole counts adding up to `total`: each quota's floor, the rest to the largest remainders (ties by source)."""
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def picks(n: int, k: int, *, seed: int, epoch: int, source: int) -> np.ndarray:
    """The items (0..n-1, with repeats, ascending) that a source of `n` items holding `k` per epoch gives `epoch`,
    in 32 bits where n allows (an epoch keeps them).

    Every item ⌊k/n⌋ times, and the next k mod n positions of the source's walk
    over its passes (see the module's docstring): no item twice among them.
    """
    index = _index_type(n)
    whole, r = divmod(k, n)
    drawn = _Walk(n, r, seed, source).epoch(epoch).astype(index) if r else np.zeros(0, index)
    if not whole:
        drawn.sort()
        return drawn
    if not r:
        return np.repeat(np.arange(n, dtype=index), whole)
    # Each item's count, in one pass: no sort of the whole source's repeats.
    times = np.bincount(drawn, minlength=n)
    times += whole
    return np.repeat(np.arange(n, dtype=index), times)


class _Passes:
    """A source's walk over its passes, r (0 < r < n) positions an epoch, each pass a permutation of its n
    positions' contents (items; or rows, a unit's in order): what its passes share, whatever they hold.

    Pass c's first `cut(c)` positions belong to the epoch begun in pass c-1
    (its head), the rest of that epoch is pass c-1's tail. The head holds the
    first cut(c) of pass c's seeded permutation (`_cycle_keys`) not in that
    tail; the tail's ones it passes over follow it, then the rest in the
    permutation's order. Those it passes over are at most the tail's
    r - cut(c), so from position r on a pass is its permutation: a tail that
    starts there (every pass whose epoch begun at cut(c) ends inside it) is
    read off its permutation, and no head depends on more than the pass before.

    A pass whose two epochs both straddle (cut(c) + r > n, a *chained* pass:
    only where r > n/2) is its head and its tail, the tail being what the head
    leaves. Chained passes come in runs, each head cut(c) - cut(c+1) = n - r
    shorter than the one before and inside it (else the epoch between them
    repeats one): every head of a run is the first of the run's first head's
    order, so each is computed from the pass before the run.
    """

    def __init__(self, n: int, r: int) -> None:
        self.n, self.r = n, r

    def _cut(self, c: int) -> int:
        """How many of pass c's first positions the epoch begun in pass c-1 takes (0: an epoch begins the pass)."""
        return -c * self.n % self.r

    def _chained(self, c: int) -> bool:
        return self._cut(c) > self.n - self.r

    def _first_of_run(self, c: int) -> int:
        """The pass whose permutation orders pass c's head: its own, or a chained run's first."""
        if not self._chained(c):
            return c
        return c - (self.r - 1 - self._cut(c)) // (self.n - self.r)  # back where a head would be r or longer

    def _where(self, epoch: int) -> tuple[int, int, bool]:
        """(the pass an epoch begins in, its position there, whether it ends in the next)."""
        c, at = divmod(epoch * self.r, self.n)
        return c, at, at + self.r > self.n


class _Walk(_Passes):
    """The walk over a source's n items."""

    def __init__(self, n: int, r: int, seed: int, source: int) -> None:
        super().__init__(n, r)
        self.seed, self.source = seed, source
        # An epoch's parts share passes and what they hold: each permutation drawn, each part found, once.
        self._keys: dict[int, np.ndarray] = {}
        self._heads: dict[int, np.ndarray] = {}
        self._tails: dict[int, np.ndarray] = {}

    def epoch(self, epoch: int) -> np.ndarray:
        """The items (distinct, in no particular order) of positions [epoch·r, (epoch+1)·r)."""
        c, at, straddles = self._where(epoch)
        if straddles:
            return np.concatenate([self._tail(c), self._head(c + 1)])
        return self._inside(c, at, at + self.r)

    def _permutation(self, c: int) -> np.ndarray:
        if c not in self._keys:
            self._keys[c] = _cycle_keys(self.n, self.seed, self.source, c)
        return self._keys[c]

    def _head(self, c: int) -> np.ndarray:
        """Pass c's first cut(c) > 0 items."""
        if c not in self._heads:
            first = self._first_of_run(c)
            taken = np.zeros(self.n, bool)
            taken[self._tail(first - 1)] = True
            self._heads[c] = _smallest(self._permutation(first)[~taken], 0, self._cut(c), self.n)
        return self._heads[c]

    def _tail(self, c: int) -> np.ndarray:
        """Pass c's items from where the epoch that ends in pass c+1 begins."""
        if c not in self._tails:
            if self._chained(c):
                rest = np.ones(self.n, bool)
                rest[self._head(c)] = False
                self._tails[c] = np.flatnonzero(rest)
            else:
                self._tails[c] = self._inside(c, self.n + self._cut(c + 1) - self.r, self.n)
        return self._tails[c]

    def _inside(self, c: int, lo: int, hi: int) -> np.ndarray:
        """The items at positions [lo, hi) of a pass c that is not chained, cut(c) <= lo."""
        cut = self._cut(c)
        if not cut or lo >= self.r:
            return _smallest(self._permutation(c), lo, hi, self.n)
        rest = np.ones(self.n, bool)
        rest[self._head(c)] = False
        return _smallest(self._permutation(c)[rest], lo - cut, hi - cut, self.n)


def row_ranges(rows: Sequence[int], k: int, *, seed: int, epoch: int, source: int) -> list[tuple[int, int, int]]:
    """The rows that a table source whose units (row groups, spans) hold `rows` rows each gives `epoch`, `k` in
    all, as (unit, start, stop) ranges of its units' rows, in the units' order (a unit's repeats side by side).

    As `picks` does with items, over rows: every unit whole ⌊k/N⌋ times (N
    rows in all), and the next k mod N rows of the source's walk over its
    passes, each a seeded permutation of its units, each unit's rows in order
    (`_RowWalk`): no row twice among them. A unit the walk cuts gives the rest
    of its rows to the next epoch, so every row is taken once before any is
    taken again.
    """
    sizes = np.asarray(rows, dtype=np.int64)
    whole, r = divmod(k, int(sizes.sum()))
    out = [(u, 0, int(sizes[u])) for u in np.flatnonzero(sizes).tolist() for _ in range(whole)]
    if r:
        out += _RowWalk(sizes, r, seed, source).epoch(epoch)
    out.sort()
    return out


class _RowWalk(_Passes):
    """The walk over a table source's rows, its units' in a seeded order each pass, each unit's rows in order.

    A head or a tail holds, of every unit, some first rows or some last ones
    (a head takes the rows a tail leaves of a unit, from its start): a head
    is each unit's rows [0, stop), a tail its rows [start, size).
    """

    def __init__(self, rows: np.ndarray, r: int, seed: int, source: int) -> None:
        super().__init__(int(rows.sum()), r)
        self.rows, self.seed, self.source = rows, seed, source
        self._orders: dict[int, np.ndarray] = {}
        self._heads: dict[int, np.ndarray] = {}

    def epoch(self, epoch: int) -> list[tuple[int, int, int]]:
        """The (unit, start, stop) ranges of positions [epoch·r, (epoch+1)·r), no row in two."""
        c, at, straddles = self._where(epoch)
        if not straddles:
            return self._inside(c, at, at + self.r)
        start, stop = self._tail(c), self._head(c + 1)
        return ([(u, int(start[u]), int(self.rows[u])) for u in np.flatnonzero(start < self.rows).tolist()]
                + [(u, 0, int(stop[u])) for u in np.flatnonzero(stop).tolist()])

    def _order(self, c: int) -> np.ndarray:
        """Pass c's permutation of the units."""
        if c not in self._orders:
            keys = _cycle_keys(len(self.rows), self.seed, self.source, c)
            keys.sort()
            self._orders[c] = (keys & np.uint64((1 << (len(self.rows) - 1).bit_length()) - 1)).astype(np.int64)
        return self._orders[c]

    def _head(self, c: int) -> np.ndarray:
        """Pass c's first cut(c) > 0 rows, as each unit's stop."""
        if c not in self._heads:
            first = self._first_of_run(c)
            free = self._tail(first - 1)[self._order(first)]  # each unit's rows before the tail's
            before = np.cumsum(free) - free
            stop = np.zeros(len(self.rows), np.int64)
            stop[self._order(first)] = np.clip(self._cut(c) - before, 0, free)
            self._heads[c] = stop
        return self._heads[c]

    def _tail(self, c: int) -> np.ndarray:
        """Pass c's rows from where the epoch that ends in pass c+1 begins, as each unit's start."""
        if self._chained(c):
            return self._head(c)
        start = self.rows.copy()
        for u, a, _ in self._inside(c, self.n + self._cut(c + 1) - self.r, self.n):
            start[u] = a
        return start

    def _inside(self, c: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """The (unit, start, stop) ranges of positions [lo, hi) of a pass c that is not chained, cut(c) <= lo."""
        cut, order = self._cut(c), self._order(c)
        first = np.zeros(len(self.rows), np.int64)
        if cut and lo < self.r:
            first = self._head(c)
            lo, hi = lo - cut, hi - cut
        left = (self.rows - first)[order]
        ends = np.cumsum(left)
        starts = ends - left
        out = []
        for p in range(int(np.searchsorted(ends, lo, side="right")), int(np.searchsorted(starts, hi, side="left"))):
            a, b = max(lo, int(starts[p])), min(hi, int(ends[p]))
            if a < b:
                u = int(order[p])
                out.append((u, int(first[u]) + a - int(starts[p]), int(first[u]) + b - int(starts[p])))
        return out


def _cycle_keys(n: int, seed: int, source: int, cycle: int) -> np.ndarray:
    """The sort keys of the source's permutation `cycle`: the raw output of a PCG64 seeded by (seed, source,
    cycle), whose stream NumPy keeps stable across versions, the item in a key's low bits so the keys are
    distinct."""
    digest = hashlib.sha256(f"air-mix:{seed}:{source}:{cycle}".encode()).digest()
    keys = np.random.PCG64(int.from_bytes(digest, "little")).random_raw(n)
    bits = (n - 1).bit_length()
    keys >>= np.uint64(bits)
    keys <<= np.uint64(bits)
    for lo in range(0, n, _BLOCK):  # a block at a time: no second array of the source's size
        keys[lo:lo + _BLOCK] |= np.arange(lo, min(n, lo + _BLOCK), dtype=np.uint64)
    return keys


def _smallest(keys: np.ndarray, lo: int, hi: int, n: int) -> np.ndarray:
    """The items (of n) whose keys (`_cycle_keys`, some of them) rank [lo, hi) among `keys`, in no particular
    order: a partition finds them in one pass, no sort."""
    mask = np.uint64((1 << (n - 1).bit_length()) - 1)
    if not lo and hi == len(keys):
        return (keys & mask).view(np.int64)
    part = np.partition(keys, ([lo] if lo else []) + ([hi - 1] if hi < len(keys) else []))[lo:hi]
    part &= mask  # a copy of the keys: no need of another
    return part.view(np.int64)


def _index_type(n: int) -> type[np.signedinteger]:
    """The integers that number n slots: 32 bits where they do (at 10**7 slots an array of them is 40 MB, not 80)."""
    return np.int32 if n < 2**31 else np.int64


def _picks_before(j: np.ndarray, k: int, k_other: int, *, ties_first: bool) -> np.ndarray:
    """How many of another source's k_other picks sit before the j-th of k: those with (2j' + 1)/2k_other below
    (2j + 1)/2k, or equal to it where `ties_first` (that source comes earlier), counted in whole numbers."""
    a = (2 * j + 1) * k_other
    if not ties_first:
        a -= 1
    a //= k  # the largest m with m·k below (2j + 1)·k_other (or up to it): (m + 1) // 2 odd numbers up to it
    a += 1
    a //= 2
    return np.minimum(a, k_other, out=a)


class Mixture:
    """A mixture's sources as its planner sees them, and what its epochs share, computed once for all of them.

    Args:
        sizes: every source's items' sizes (bytes), one array per source, in the sources' order.
        counts: the items each source holds per epoch (`source_counts`).
        by_size: each source's `shares.largest_first` order, when its listing carries it.

    Attributes:
        offsets: where each source's items start in the mixture's listing (and, last, its length).
    """

    def __init__(self, sizes: Sequence[np.ndarray], counts: Sequence[int], *,
                 by_size: Sequence[np.ndarray] | None = None) -> None:
        self.sizes = [np.asarray(s, dtype=np.int64) for s in sizes]
        self.counts = [int(k) for k in counts]
        self.by_size = list(by_size) if by_size is not None else [largest_first(s) for s in self.sizes]
        self.offsets = np.concatenate([[0], np.cumsum([len(s) for s in self.sizes])]).astype(np.int64)
        self._homes: dict[int, list[np.ndarray]] = {}
        self._last: tuple[tuple[int, int], Epoch] | None = None

    def epoch(self, epoch: int, seed: int) -> Epoch:
        """The items of `epoch`. The last one asked is kept (a pass plans, counts and reads it), and only that one:
        at 10**7 slots an epoch holds ~250 MB in every process that plans it, 48 of them on a node of 8 ranks."""
        key = (epoch, seed)
        if self._last is None or self._last[0] != key:
            self._last = None  # its arrays freed before the next one's are made: their pages serve again
            self._last = key, Epoch(self, epoch=epoch, seed=seed)
        return self._last[1]

    @cached_property
    def interleave(self) -> np.ndarray:
        """The epoch's slots, as positions among the sources' picks laid end to end (the counts alone fix it).

        Source i's j-th pick sits at (2j + 1)/2kᵢ of the way, ties to the earlier
        source: its slot is j plus how many picks of each other source sit before
        it, a whole-number division each (`_picks_before`), so the slots come
        from one scatter, with no sort and no float.
        """
        total = sum(self.counts)
        out = np.empty(total, _index_type(total))
        start = 0
        for i, k in enumerate(self.counts):
            for lo in range(0, k, _BLOCK):  # a block at a time: each temporary a few MB, whatever the epoch's size
                j = np.arange(lo, min(k, lo + _BLOCK), dtype=np.int64)
                slot = j.copy()
                for other, k_other in enumerate(self.counts):
                    if other != i and k_other:
                        slot += _picks_before(j, k, k_other, ties_first=other < i)
                out[slot] = j + start
            start += k
        return out

    def homes(self, world_size: int) -> list[np.ndarray]:
        """Every source's items' home ranks over `world_size` ranks: each source's own bytes deal, by size alone."""
        if world_size not in self._homes:
            small = np.min_scalar_type(world_size)  # in 8 or 16 bits a stable sort of ranks is a radix sort: one pass
            homes = []
            for order in self.by_size:  # each source's own deal: balanced, whatever its share
                home = np.empty(len(order), small)
                home[order] = _snake_lanes(world_size, len(order))
                homes.append(home)
            self._homes[world_size] = homes
        return self._homes[world_size]


class Epoch:
    """One epoch of a mixture (make one with `Mixture.epoch`): its slots, the items it holds, with repeats,
    and their deal order.

    Attributes:
        offsets: where each source's items start in the mixture's listing.
        sizes: the slots' sizes.
        items: the slots' items (numbered in the mixture's listing), the
            sources' picks interleaved evenly (`Mixture.interleave`), so that
            an unshuffled epoch alternates them in their proportions.
    """

    def __init__(self, mixture: Mixture, *, epoch: int, seed: int) -> None:
        self.mixture, self.offsets = mixture, mixture.offsets
        self._chosen = [picks(len(s), k, seed=seed, epoch=epoch, source=i)
                        for i, (s, k) in enumerate(zip(mixture.sizes, mixture.counts))]
        self.sizes = self._interleaved(mixture.sizes)
        self._orders: dict[int, np.ndarray] = {}

    def _interleaved(self, values: Sequence[np.ndarray] | None) -> np.ndarray:
        """Each slot's value: its pick's in its source's `values` (None: the pick's number in the mixture's listing).

        Gathered source by source into one array, each in ascending order (a
        pass each), then interleaved by one random gather: two arrays of the
        epoch's size, no more.
        """
        picked = np.empty(len(self.mixture.interleave), np.int64 if values is None else np.result_type(*values))
        start = 0
        for i, c in enumerate(self._chosen):
            into = picked[start:start + len(c)]
            if values is None:
                np.add(c, self.offsets[i], out=into)
            else:
                np.take(values[i], c, out=into, mode="clip")  # "raise" would copy through a buffer of its own
            start += len(c)
        return picked[self.mixture.interleave]

    @cached_property
    def items(self) -> np.ndarray:
        """Every slot's item (a stream's plan gathers its own slots' with `items_at`)."""
        return self._interleaved(None)

    def items_at(self, slots: np.ndarray) -> np.ndarray:
        """The items of `slots` (a stream's few, without gathering every slot's item)."""
        at = self.mixture.interleave[slots]
        starts = np.cumsum([0] + self.mixture.counts)
        source = np.searchsorted(starts, at, side="right") - 1
        out = np.empty(len(at), np.int64)
        for s in np.unique(source).tolist():
            mine = source == s
            out[mine] = self._chosen[s][at[mine] - starts[s]] + self.offsets[s]
        return out

    def source_of(self, items: np.ndarray) -> np.ndarray:
        """The source each of `items` (numbered in the mixture's listing) comes from."""
        return np.searchsorted(self.offsets, items, side="right") - 1

    def deal_order(self, world_size: int) -> np.ndarray:
        """The slots in the order whose snake deal over `world_size` ranks (`shares.Deal`, balance "bytes")
        gives each slot its item's home rank, save the slots moved to even out the counts.

        Each rank's slots sit largest first at the positions the snake gives
        that rank, so the order stays close to largest first: a resume that
        deals the rest over another number of ranks still balances bytes.
        """
        if world_size not in self._orders:  # a pass plans and counts with it
            self._orders[world_size] = self._deal_order(world_size)
        return self._orders[world_size]

    def _deal_order(self, world_size: int) -> np.ndarray:
        n = len(self.sizes)
        if world_size == 1 or not n:
            return largest_first(self.sizes)
        rank = self._interleaved(self.mixture.homes(world_size))
        want = np.array([_lane_count(world_size, r, n) for r in range(world_size)])
        drawn = np.bincount(rank, minlength=world_size)
        if (drawn != want).any():
            rank = _evened(rank, self.sizes, drawn, want)
        grouped, starts = _by_rank_largest_first(rank, self.sizes, world_size), np.cumsum(want) - want
        order = np.empty(n, _index_type(n))
        for lo in range(0, n, _BLOCK):  # a block at a time: no other array of the epoch's size is made
            order[lo:lo + _BLOCK] = grouped[_snake_gather(starts, lo, min(n, lo + _BLOCK))]
        return order


def _by_rank_largest_first(rank: np.ndarray, sizes: np.ndarray, ranks: int) -> np.ndarray:
    """The slots rank by rank, each rank's largest first, ties by slot (as 32-bit numbers where they fit).

    A rank at a time: its slots found in a pass, in ascending order, so its
    sizes' gather runs forward; (size, slot) packed in one int64 and sorted
    as plain values. Only one rank's keys are ever in memory: an eighth of
    the epoch's over 8 ranks, not an int64 array of every slot.
    """
    n = len(sizes)
    largest = int(sizes.max())
    slot_bits = (n - 1).bit_length()
    packed = slot_bits + largest.bit_length() <= 63  # else files of many GB among many slots
    out = np.empty(n, _index_type(n))
    at = 0
    for r in range(ranks):
        slots = np.flatnonzero(rank == r)
        if packed:
            keys = largest - sizes[slots]
            keys <<= slot_bits
            keys |= slots
            keys.sort()
            keys &= (1 << slot_bits) - 1
        else:
            keys = slots[np.argsort(largest - sizes[slots], kind="stable")]
        out[at:at + len(slots)] = keys
        at += len(slots)
    return out


def _snake_gather(starts: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """For each of the positions [lo, hi) of the snake deal over len(starts) ranks, where its slot lies among
    slots grouped rank by rank (rank r's from `starts[r]`, in the order r takes them).

    Round k of the snake (positions 2Rk .. 2Rk + 2R - 1) gives rank q its
    (2k)-th slot at column q and rank 2R-1-q its (2k+1)-th at column q >= R:
    one table of rounds × columns, no sort.
    """
    period = 2 * len(starts)
    column = np.arange(period)
    lane = np.where(column < len(starts), column, period - 1 - column)
    first = starts[lane] + (column >= len(starts))
    skipped = lo // period  # the rounds before the block's
    rounds = np.arange(skipped, -(-hi // period), dtype=np.int64)
    return (2 * rounds[:, None] + first[None, :]).ravel()[lo - skipped * period:hi - skipped * period]


def _evened(rank: np.ndarray, sizes: np.ndarray, drawn: np.ndarray, want: np.ndarray) -> np.ndarray:
    """`rank` (in 8 or 16 bits) with the excess of each rank that drew more slots than it `want`s moved to
    those that drew fewer.

    The slots a rank gives up are spread evenly over its slots (in the
    epoch's order, which sizes do not follow), and they go, largest first,
    round the short ranks in proportion to what each lacks, so each rank's
    bytes stay near its share of the bytes.
    """
    # Each such rank's slots found by a pass of their own: no sort of every slot by rank.
    moved = np.concatenate([np.flatnonzero(rank == r)[np.arange(drawn[r] - want[r]) * drawn[r] // (drawn[r] - want[r])]
                            for r in np.flatnonzero(drawn > want)])
    moved = moved[np.argsort(-sizes[moved], kind="stable")]
    lack = np.maximum(want - drawn, 0)
    short = np.repeat(np.arange(len(want)), lack)
    spot = np.concatenate([(np.arange(d) + 0.5) / d for d in lack if d])
    out = rank.copy()
    out[moved] = short[np.argsort(spot, kind="stable")]
    return out
