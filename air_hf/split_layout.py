"""Which split each file belongs to, from the folder's layout. Pure: paths in, indices out.

Two layouts name their splits without doubt, and both are common on volumes
that hold copies of Hub datasets:

1. the Hub's sharded files, `data/{split}-00000-of-00004.parquet`;
2. top-level folders named for a split: `train/`, `validation/`, `test/`, or
   one of datasets' other `SPLIT_KEYWORDS` (training, valid, dev, val,
   testing, eval, evaluation), so `train/cat/1.jpg` is a `train` row whose
   class is `cat`.

Otherwise every file is in `train`. datasets also guesses splits from
keywords anywhere in a name (`c_test.bin`, `runs/eval-3/`) and then silently
leaves out every file that matches no split; that guess is not made here.
With a split layout, a file outside every split is an error that names it.
"""

from __future__ import annotations

import bisect
import re
from typing import Sequence

from datasets.data_files import SPLIT_KEYWORDS

from air_core.doors import OptionError

_SHARDED = re.compile(r"data/(\w+(?:\.\w+)*)-[0-9]{5}-of-[0-9]{5}[^/]*\.[^/]*")
_FOLDERS = {word: str(split) for split, words in SPLIT_KEYWORDS.items() for word in words}
_ORDER = [str(split) for split in SPLIT_KEYWORDS]


def by_split(paths: Sequence[str]) -> dict[str, list[int]]:
    """Indices of `paths` (relative to the folder, sorted, as a listing holds them) per split: train, validation,
    test, then others by name.

    Only paths that may name a split are read: those under `data/` or under a folder named for a split, each
    a run of the sorted paths found by bisection. A listing's 10^6 paths are not all made strings.
    """
    n = len(paths)
    lo, hi = _under(paths, "data")
    sharded = [(i, m.group(1)) for i in range(lo, hi) if (m := _SHARDED.fullmatch(paths[i]))]
    if sharded:
        runs = [(i, i + 1, split) for i, split in sharded]
        layout = "data/{split}-00000-of-00001.* files"
    else:
        runs = sorted((*_under(paths, word), split) for word, split in _FOLDERS.items())
        runs = [run for run in runs if run[0] < run[1]]
        layout = "top-level folders named for splits (train/, validation/, test/, ...)"
        if not runs:
            return {"train": list(range(n))}
    inside = sum(stop - start for start, stop, _ in runs)
    if inside < n:
        loose = _outside(paths, runs, 3)
        raise OptionError(
            f"the folder is laid out in splits, as {layout}, but {n - inside} file(s) are in none of them, "
            f"e.g. {', '.join(loose)}: leave them out with exclude=, or give one split's folder as data_dir"
        )
    out: dict[str, list[int]] = {}
    for start, stop, split in runs:
        out.setdefault(split, []).extend(range(start, stop))
    return {s: out[s] for s in sorted(out, key=lambda s: (_ORDER.index(s) if s in _ORDER else len(_ORDER), s))}


def _under(paths: Sequence[str], folder: str) -> tuple[int, int]:
    """Where the sorted `paths` under the top-level `folder` begin and end (`0` is the character after `/`)."""
    return bisect.bisect_left(paths, f"{folder}/"), bisect.bisect_left(paths, f"{folder}0")


def _outside(paths: Sequence[str], runs: list[tuple[int, int, str]], most: int) -> list[str]:
    """The first `most` of `paths` that lie in none of `runs` (ascending, disjoint)."""
    found: list[str] = []
    at = 0
    for start, stop, _ in [*runs, (len(paths), len(paths), "")]:
        found += [paths[i] for i in range(at, min(start, at + most - len(found)))]
        if len(found) == most:
            break
        at = stop
    return found
