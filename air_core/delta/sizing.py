"""How big the exported Parquet files and row groups are. Pure.

A row group is the unit streaming readers fetch and split a table by; a
file is one open on the volume and one entry in the node cache.
"""

from __future__ import annotations

from ..errors import OptionError

ROW_GROUP_BYTES = 16 << 20
ROW_GROUPS_PER_FILE = 8
_MIN_GROUP_ROWS, _MAX_GROUP_ROWS = 64, 1 << 20


def layout(row_bytes: float | None, rows_per_file: int | None = None,
           rows_per_row_group: int | None = None) -> tuple[int, int]:
    """(rows per file, rows per row group): the given ones, else sized from bytes per row.

    A row group holds about `ROW_GROUP_BYTES` of Parquet data, a file
    `ROW_GROUPS_PER_FILE` groups.

    Raises:
        OptionError: `rows_per_file` below `rows_per_row_group`.
    """
    if rows_per_row_group is None:
        guess = ROW_GROUP_BYTES / row_bytes if row_bytes else 128 * 1024
        rows_per_row_group = int(min(max(guess, _MIN_GROUP_ROWS), _MAX_GROUP_ROWS))
        if rows_per_file is not None:
            rows_per_row_group = min(rows_per_row_group, rows_per_file)
    if rows_per_file is None:
        rows_per_file = rows_per_row_group * ROW_GROUPS_PER_FILE
    if rows_per_file < rows_per_row_group:
        raise OptionError(f"rows_per_file={rows_per_file} is below rows_per_row_group={rows_per_row_group}: "
                          "a file holds whole row groups; raise rows_per_file or lower rows_per_row_group")
    return rows_per_file, rows_per_row_group
