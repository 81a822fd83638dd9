"""Handing the C heap's free pages back to the system after a plan's large temporaries.

glibc's malloc serves a large block (an array) with a mapping of its own,
unmapped when freed, but each such block freed raises that threshold to its
size (up to 32 MB): the arrays of that size made afterwards come from the
heap, and once freed stay in the process (only the heap's free top is given
back). A plan of a share of 10^7 files makes ~50 MB of arrays of a few MB
each, so each of a node's DataLoader workers kept ~20 MB of freed memory
(PSS, measured) for the rest of its life. `malloc_trim` gives such pages
back; it costs well under a millisecond.
"""

from __future__ import annotations

import ctypes


def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc's; other C libraries give back or keep as they do
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def give_back_freed() -> None:
    """Return the pages the C heap holds free to the system (glibc's `malloc_trim(0)`; elsewhere nothing)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


__all__ = ["give_back_freed"]
