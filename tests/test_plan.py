"""The plan's contracts over many random cases: exactly once, balanced, equal on request, seeded."""

import random
from collections import Counter

import pytest

from air_core import Grid, OptionError
from air_core.plan import epoch_order, plan, rank_shares

CASES = [(world, workers) for world in range(1, 9) for workers in range(1, 7)]


def random_sizes(rng: random.Random) -> list[int]:
    n = rng.randint(0, 60)
    return [rng.choice([1, 10, 100, 1000, 150_000]) * rng.randint(1, 9) for _ in range(n)]


def all_streams(sizes, world, workers, **opts):
    return {(r, w): plan(sizes, Grid(r, world, w, workers), **opts) for r in range(world) for w in range(workers)}


@pytest.mark.parametrize("world,workers", CASES)
@pytest.mark.parametrize("balance", ["bytes", "stride"])
def test_every_item_exactly_once(world, workers, balance):
    rng = random.Random(world * 100 + workers)
    for _ in range(10):
        sizes = random_sizes(rng)
        streams = all_streams(sizes, world, workers, balance=balance, shuffle=True, seed=7, epoch=rng.randint(0, 5))
        seen = Counter(i for items in streams.values() for i in items)
        assert sorted(seen) == list(range(len(sizes)))
        assert set(seen.values()) <= {1}


@pytest.mark.parametrize("world,workers", CASES)
def test_bytes_balanced_within_largest_item(world, workers):
    rng = random.Random(world * 1000 + workers)
    for _ in range(10):
        sizes = random_sizes(rng)
        if not sizes:
            continue
        largest = max(sizes)
        shares = rank_shares(sizes, world_size=world)
        totals = [sum(sizes[i] for i in s) for s in shares]
        assert max(totals) - min(totals) <= largest
        counts = [len(s) for s in shares]
        assert max(counts) - min(counts) <= 1
        for r in range(world):
            per_worker = [sum(sizes[i] for i in plan(sizes, Grid(r, world, w, workers))) for w in range(workers)]
            assert max(per_worker) - min(per_worker) <= largest


@pytest.mark.parametrize("world,workers", CASES)
@pytest.mark.parametrize("how", ["pad", "drop"])
@pytest.mark.parametrize("balance", ["bytes", "stride"])
def test_equalize_gives_equal_counts_per_rank(world, workers, how, balance):
    rng = random.Random(world * 7 + workers)
    for _ in range(10):
        sizes = random_sizes(rng)
        plain = [len(s) for s in rank_shares(sizes, world_size=world, balance=balance)]
        if how == "drop" and sizes and not min(plain):
            with pytest.raises(OptionError):
                rank_shares(sizes, world_size=world, balance=balance, equalize=how)
            continue
        if balance == "bytes" and sizes:  # counts within one: equalizing moves at most one item per rank
            assert max(map(len, rank_shares(sizes, world_size=world))) - min(
                map(len, rank_shares(sizes, world_size=world))) <= 1
        streams = all_streams(sizes, world, workers, equalize=how, balance=balance, shuffle=True)
        per_rank = [sum(len(streams[r, w]) for w in range(workers)) for r in range(world)]
        assert len(set(per_rank)) == 1
        covered = {i for items in streams.values() for i in items}
        if how == "pad":
            assert covered == set(range(len(sizes)))  # padding repeats, never loses
            assert per_rank[0] == max(plain)
        else:
            assert per_rank[0] == min(plain)
            assert len(covered) == per_rank[0] * world  # dropping never duplicates


def test_drop_that_would_empty_every_rank_is_an_error():
    with pytest.raises(OptionError, match="equalize='pad'"):
        rank_shares([1, 2], world_size=3, equalize="drop")
    with pytest.raises(OptionError, match="equalize='pad'"):
        rank_shares([1, 2], world_size=3, balance="stride", equalize="drop")


def test_shuffle_is_identical_across_ranks_and_differs_across_epochs():
    sizes = [100] * 200
    assert epoch_order(200, epoch=3, seed=5, shuffle=True) == epoch_order(200, epoch=3, seed=5, shuffle=True)
    assert epoch_order(200, epoch=3, seed=5, shuffle=True) != epoch_order(200, epoch=4, seed=5, shuffle=True)
    e0 = all_streams(sizes, 4, 2, shuffle=True, seed=5, epoch=0)
    e1 = all_streams(sizes, 4, 2, shuffle=True, seed=5, epoch=1)
    assert e0 != e1
    # Each rank computes its share alone; the shares still fit together without overlap.
    for streams in (e0, e1):
        assert sorted(i for s in streams.values() for i in s) == list(range(200))
    # Ranks keep their items across epochs (each node caches only its share); the order changes.
    for r in range(4):
        r0 = [i for w in range(2) for i in e0[r, w]]
        r1 = [i for w in range(2) for i in e1[r, w]]
        assert set(r0) == set(r1) and r0 != r1


def test_stride_reproduces_the_reference_split():
    sizes = [1] * 23
    for r in range(2):
        for w in range(3):
            gid = w * 2 + r  # the reference's global worker id
            assert plan(sizes, Grid(r, 2, w, 3), balance="stride") == list(range(23))[gid::6]


def test_unknown_options_are_named():
    with pytest.raises(OptionError, match="balance='count'"):
        plan([1], Grid(), balance="count")
    with pytest.raises(OptionError, match="equalize='yes'"):
        plan([1], Grid(), equalize="yes")
    with pytest.raises(OptionError, match="rank=2 out of range"):
        Grid(2, 2)


def test_planning_a_million_items_is_fast():
    import time

    sizes = [random.Random(i).randint(1, 1 << 20) for i in range(1_000)] * 1_000
    t = time.perf_counter()
    items = plan(sizes, Grid(3, 8, 1, 6), shuffle=True, seed=1, epoch=2)
    assert time.perf_counter() - t < 10
    assert 1_000_000 // 48 - 1 <= len(items) <= 1_000_000 // 48 + 1
