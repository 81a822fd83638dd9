"""Read a folder through `load_dataset("uc-volume", ...)` and let the script end, as a user's script does.

Usage: exits.py DATA_DIR [STOP_AFTER]

Reads the whole stream, or leaves its iterator after STOP_AFTER rows, then
exits through the interpreter's own finalization: what is left running there
(a native reader's thread, a pool thread) shows in the exit code.
"""

import sys

import datasets

import air_hf  # noqa: F401  (registers "uc-volume")

stop_after = int(sys.argv[2]) if len(sys.argv) > 2 else None
rows = datasets.load_dataset("uc-volume", data_dir=sys.argv[1], split="train", streaming=True)
for n, _ in enumerate(rows, 1):
    if n == stop_after:
        break
