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

import re
from typing import Sequence

from datasets.data_files import SPLIT_KEYWORDS

from air_core.doors import OptionError

_SHARDED = re.compile(r"data/(\w+(?:\.\w+)*)-[0-9]{5}-of-[0-9]{5}[^/]*\.[^/]*")
_FOLDERS = {word: str(split) for split, words in SPLIT_KEYWORDS.items() for word in words}
_ORDER = [str(split) for split in SPLIT_KEYWORDS]


def by_split(paths: Sequence[str]) -> dict[str, list[int]]:
    """Indices of `paths` (relative to the folder) per split: train, validation, test, then others by name."""
    sharded = [m.group(1) if (m := _SHARDED.fullmatch(p)) else None for p in paths]
    if any(sharded):
        found, layout = sharded, "data/{split}-00000-of-00001.* files"
    else:
        found = [_FOLDERS.get(p.split("/", 1)[0]) if "/" in p else None for p in paths]
        layout = "top-level folders named for splits (train/, validation/, test/, ...)"
        if not any(found):
            return {"train": list(range(len(paths)))}
    loose = [p for p, s in zip(paths, found) if s is None]
    if loose:
        raise OptionError(
            f"the folder is laid out in splits, as {layout}, but {len(loose)} file(s) are in none of them, "
            f"e.g. {', '.join(loose[:3])}: leave them out with exclude=, or give one split's folder as data_dir"
        )
    out: dict[str, list[int]] = {}
    for i, s in enumerate(found):
        out.setdefault(s, []).append(i)
    return {s: out[s] for s in sorted(out, key=lambda s: (_ORDER.index(s) if s in _ORDER else len(_ORDER), s))}
