"""The plan's contracts over many random cases: exactly once, balanced, equal on request, seeded;
and the same plans as the pure-Python planner it replaced, item for item."""

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from air_core import OptionError
from air_core.grid import Grid
from air_core.planning import shares
from air_core.planning.shares import Planning, epoch_order, largest_first, snake, worker_share

# The planners called with the planning's fields as loose keywords, as the cases draw them.
def plan(sizes, grid, *, epoch=0, exclude=(), by_size=None, **planning):
    return shares.plan_epoch(sizes, grid, planning=Planning(**planning), epoch=epoch, exclude=exclude, by_size=by_size)


def rank_shares(sizes, *, world_size, epoch=0, exclude=(), **planning):
    return shares.rank_shares(sizes, world_size=world_size, planning=Planning(**planning), epoch=epoch,
                              exclude=exclude)


def rank_share(sizes, *, rank, world_size, epoch=0, by_size=None, **planning):
    return shares.rank_share(sizes, rank=rank, world_size=world_size, planning=Planning(**planning), epoch=epoch,
                             by_size=by_size)


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


def test_a_million_items_plan_into_even_streams():
    # How long it takes is measured by benchmarks/bench_plan.py (the same grid, 10**5 to 10**7 items).
    sizes = [random.Random(i).randint(1, 1 << 20) for i in range(1_000)] * 1_000
    items = plan(sizes, Grid(3, 8, 1, 6), shuffle=True, seed=1, epoch=2)
    assert 1_000_000 // 48 - 1 <= len(items) <= 1_000_000 // 48 + 1


# -- the same plans as the pure-Python planner -----------------------------------------------------
# The planner before numpy, verbatim but for its epoch order, which it takes as `order_of`: the new
# shuffle is another permutation than random.shuffle's, and everything downstream of it must match.


def old_snake(items, sizes, parts):
    if parts == 1:
        return [list(items)]
    n = len(items)
    weight = [sizes[i] for i in items]
    by_size = sorted(sorted(range(n), key=items.__getitem__), key=weight.__getitem__, reverse=True)
    period = 2 * parts
    lanes = [j if j < parts else period - 1 - j for j in range(period)] * (n // period + 1)
    part_of = [0] * n
    for k, lane in zip(by_size, lanes):
        part_of[k] = lane
    out = [[] for _ in range(parts)]
    for lane, item in zip(part_of, items):
        out[lane].append(item)
    return out


def old_equalize(shares, order, how):
    counts = [len(s) for s in shares]
    if how == "none" or min(counts) == max(counts):
        return shares
    if how == "drop":
        return [s[: min(counts)] for s in shares]
    target = max(counts)
    out = []
    for s in shares:
        source = s or list(order)
        out.append(s + [source[k % len(source)] for k in range(target - len(s))])
    return out


def old_rank_shares(sizes, *, world_size, epoch=0, seed=0, shuffle=False, balance="bytes", equalize="none",
                    exclude=(), order_of=epoch_order):
    order = order_of(len(sizes), epoch=epoch, seed=seed, shuffle=shuffle)
    if exclude:
        skip = set(exclude)
        order = [i for i in order if i not in skip]
    if balance == "stride":
        shares = [list(order[r::world_size]) for r in range(world_size)]
    else:
        shares = old_snake(order, sizes, world_size)
    if equalize == "drop" and order and not exclude and not min(map(len, shares)):
        raise OptionError("every rank empty")
    return old_equalize(shares, order, equalize)


def old_worker_share(share, sizes, *, worker, num_workers, balance="bytes"):
    if num_workers == 1:
        return list(share)
    if balance == "stride":
        return list(share[worker::num_workers])
    positions = old_snake(list(range(len(share))), [sizes[i] for i in share], num_workers)[worker]
    return [share[p] for p in positions]


def old_plan(sizes, grid, *, balance="bytes", **opts):
    shares = old_rank_shares(sizes, world_size=grid.world_size, balance=balance, **opts)
    return old_worker_share(shares[grid.rank], sizes, worker=grid.worker, num_workers=grid.num_workers,
                            balance=balance)


# Sizes from a few values, zero among them: ties in the deal are the rule, not the exception. Sizes near
# 2**62 leave no room to pack a position beside them: the deal then takes its other sort.
SIZES = st.lists(st.sampled_from([0, 1, 2, 3, 100, 150_000]) | st.integers(0, 1 << 62), max_size=70)
OPTS = st.fixed_dictionaries({
    "epoch": st.integers(0, 3), "seed": st.integers(-2, 1 << 70), "shuffle": st.booleans(),
    "balance": st.sampled_from(["bytes", "stride"]), "equalize": st.sampled_from(["none", "pad", "drop"]),
})


def outcome(f, *args, **kwargs):
    """What f returns, or that it refused."""
    try:
        return f(*args, **kwargs)
    except OptionError:
        return OptionError


@settings(max_examples=400, deadline=None)
@given(sizes=SIZES, world=st.integers(1, 9), workers=st.integers(1, 7), opts=OPTS, data=st.data())
def test_same_plans_as_the_pure_python_planner(sizes, world, workers, opts, data):
    exclude = data.draw(st.sets(st.integers(0, max(len(sizes) - 1, 0))) if sizes and data.draw(st.booleans())
                        else st.just(set()))
    want = outcome(old_rank_shares, sizes, world_size=world, exclude=exclude, **opts)
    assert outcome(rank_shares, sizes, world_size=world, exclude=exclude, **opts) == want
    assert outcome(rank_shares, np.array(sizes, dtype=np.int64), world_size=world,
                   exclude=np.array(sorted(exclude), dtype=np.int64), **opts) == want  # columnar input
    for r in range(world):
        for w in range(workers):
            grid = Grid(r, world, w, workers)
            assert outcome(plan, sizes, grid, exclude=exclude, **opts) == outcome(
                old_plan, sizes, grid, exclude=exclude, **opts)
        if want is not OptionError:
            share = want[r]
            for w in range(workers):
                assert worker_share(share, sizes, worker=w, num_workers=workers, balance=opts["balance"]) == \
                    old_worker_share(share, sizes, worker=w, num_workers=workers, balance=opts["balance"])


@settings(max_examples=200, deadline=None)
@given(sizes=SIZES, parts=st.integers(1, 9), data=st.data())
def test_snake_deals_as_before_in_any_input_order(sizes, parts, data):
    items = data.draw(st.lists(st.integers(0, len(sizes) - 1), max_size=40)) if sizes else []  # repeats too
    assert snake(items, sizes, parts) == old_snake(items, sizes, parts)
    assert snake(range(len(sizes)), sizes, parts) == old_snake(range(len(sizes)), sizes, parts)


def test_the_shuffle_is_a_seeded_permutation_fixed_by_its_seed():
    for n in (0, 1, 2, 17, 1000):
        order = epoch_order(n, epoch=2, seed=9, shuffle=True)
        assert sorted(order) == list(range(n))
        assert epoch_order(n, epoch=2, seed=9, shuffle=False) == list(range(n))
    assert epoch_order(1000, epoch=2, seed=9, shuffle=True) != epoch_order(1000, epoch=2, seed=10, shuffle=True)
    # Fixed by (seed, epoch) alone, on any platform and numpy version: saved states replay it.
    assert epoch_order(10, epoch=1, seed=0, shuffle=True) == [5, 0, 3, 9, 6, 7, 8, 4, 1, 2]


@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 20])
def test_a_ranks_shuffle_keys_drawn_in_chunks_are_the_epochs_keys(chunk):
    from air_core.planning.shares import epoch_keys

    rng = np.random.default_rng(chunk)
    for n in (0, 1, 7, 63, 64, 65, 300):
        items = np.flatnonzero(rng.random(n) < 0.4)
        every = epoch_keys(n, 3, 11)
        assert epoch_keys(n, 3, 11, items, chunk=chunk).tolist() == every[items].tolist()


def test_a_ranks_shuffled_plan_is_its_part_of_the_epochs_order():
    from air_core.planning.shares import KEY_CHUNK, epoch_keys

    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 63, 64, 65, 300):
        sizes = rng.integers(0, 5, n).tolist()
        for r in range(3):
            grid = Grid(r, 3, 1, 2)
            assert plan(sizes, grid, epoch=3, seed=11, shuffle=True) == old_plan(sizes, grid, epoch=3, seed=11,
                                                                                  shuffle=True)
    n = KEY_CHUNK + 65  # a rank's keys across the plan's own chunks: items on both sides of the first cut
    items = np.flatnonzero(rng.random(n) < 0.01)
    assert epoch_keys(n, 3, 11, items).tolist() == epoch_keys(n, 3, 11)[items].tolist()


@settings(max_examples=200, deadline=None)
@given(sizes=SIZES, world=st.integers(1, 9), opts=OPTS)
def test_one_ranks_share_is_its_part_of_every_ranks(sizes, world, opts):
    every = outcome(rank_shares, sizes, world_size=world, **opts)
    carried = largest_first(np.array(sizes, dtype=np.int64))
    for r in range(world):
        assert outcome(rank_share, sizes, rank=r, world_size=world, **opts) == (
            every if every is OptionError else every[r])
        assert outcome(rank_share, sizes, rank=r, world_size=world, by_size=carried, **opts) == (
            every if every is OptionError else every[r])
