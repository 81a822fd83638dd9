"""Quoting another library's failure inside our own error messages."""

from __future__ import annotations


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type's name when empty): engines' messages run long."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
