"""Sizes in bytes as people write them: `1GiB`, `512MiB`, `2GB`, `64k`, or a plain number. Pure.

One meaning everywhere (`air-data cache prune --limit`, `air-data pack --shard-size`,
`air_core.pack`): the SI units are decimal (`kB`, `MB`, `GB`, `TB`: powers of 1000), the
IEC units and the bare letters binary (`KiB`, `MiB`, `GiB`, `TiB`, `k`, `M`, `G`, `T`:
powers of 1024).
"""

from __future__ import annotations

from .errors import OptionError

MEANING = "GB = 10^9 bytes; GiB or G = 2^30"
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30, "t": 1 << 40, "tb": 1000**4, "tib": 1 << 40}


def parse_size(text: str | int) -> int:
    """Bytes from `text` (see the module for the units); an int is taken as bytes.

    Raises:
        OptionError: `text` is no positive size.
    """
    if isinstance(text, int):
        return text
    s = str(text).strip().lower()
    number = s.rstrip("kmgtib")
    unit = s[len(number):].strip()
    try:
        value = float(number)
    except ValueError:
        value = -1
    if unit not in _UNITS or value <= 0:
        raise OptionError(f"size {text!r}: give a positive number of bytes, e.g. 1GiB, 512MiB or 1000000 "
                          f"({MEANING})")
    return int(value * _UNITS[unit])
