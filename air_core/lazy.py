"""A package's names loaded from their modules on first use (PEP 562): importing the package loads little."""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any, Callable


def exports(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package` for `names` (name -> its module, relative to the package).

    A name is imported when first asked for, then kept in the package, so later uses cost nothing.
    """
    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
