"""How one rank's share becomes Ray read tasks. Pure: numbers in, lists out."""

from __future__ import annotations

from typing import Sequence

from air_core.doors import snake

# The most bytes an Arrow `binary` array holds (its offsets are 32-bit).
BINARY_BYTES = 2**31 - 1


def task_count(items: int, parallelism: int, *, min_per_task: int = 1) -> int:
    """How many read tasks to make for `items` items when Ray asks for `parallelism`.

    Never more than `parallelism`, never fewer than one item per task, and
    fewer tasks when that would leave under `min_per_task` items in each
    (Ray then splits the output blocks to the count it asked for).
    """
    if items == 0:
        return 0
    return max(1, min(parallelism, items, items // max(1, min_per_task)))


def binary_block_bytes(block_bytes: int, largest: int) -> int:
    """The block size at which a files-mode block closes so that its contents fit Arrow `binary`.

    A block closes once its files hold the block size, so it ends under
    that size plus its last file: the largest file is subtracted from what
    `binary` holds. `largest` is at most half of that (bigger files take `large_binary`).
    """
    return min(block_bytes, BINARY_BYTES + 1 - largest)


def groups(weights: Sequence[int], parts: int) -> list[list[int]]:
    """Positions 0..len(weights)-1 dealt into `parts` weight-balanced groups, each in order.

    The deal is `air_core.doors.snake`: item counts within one of each other,
    weights within the largest item. Empty groups are left out.
    """
    if parts < 1 or not weights:
        return []
    return [g for g in snake(range(len(weights)), weights, parts) if g]
