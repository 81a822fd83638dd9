"""What the folders published on a volume share (Delta exports, packs): how long a replaced version stays, and
reading the pointer that names the current one."""

from __future__ import annotations

import json
import time

from . import transport

# A reader that resolved a version reads it to its end: one replaced is kept this long before a later run removes it.
GRACE_SECONDS = 3600.0


def clock() -> float:
    """Now, in seconds since the epoch (the clock of file mtimes), as grace periods count it."""
    return time.time()


def read_json(file: str) -> object:
    """The JSON in `file`; None when there is no such file, False when its text is not JSON.

    Every resolve asks a folder for a pointer, and most have none: a stat, not an open, says so.
    """
    if not transport.is_file(file):
        return None
    try:
        return json.loads(transport.read_file(file))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:
        return False
