"""Checks of user options, shared by every front door: each failure says what to give instead."""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Sequence

from .errors import OptionError


def whole(name: str, value: Any, *, low: int, optional: bool = False) -> None:
    """Refuse anything but an int >= `low` (bool is not a number here); None too when `optional`."""
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise OptionError(f"{name}={value!r}: give a whole number >= {low}" + (", or None" if optional else ""))


def choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Refuse a value outside `choices`."""
    if value not in choices:
        raise OptionError(f"{name}={value!r}: choose one of {tuple(choices)}")


def flag(name: str, value: Any) -> None:
    """Refuse anything but True or False."""
    if not isinstance(value, bool):
        raise OptionError(f"{name}={value!r}: give True or False")


def reject_unknown(names: Iterable[str], known: Iterable[str], *, what: str) -> None:
    """Raise `OptionError` naming each unknown option, the closest known one, and every known one."""
    known = sorted(set(known))
    unknown = [n for n in names if n not in known]
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise OptionError(f"unknown option {', '.join(hints)} for {what}; the options are: {', '.join(known)}")
