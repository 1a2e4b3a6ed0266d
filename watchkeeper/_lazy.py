"""Lazy front doors (PEP 562).

A package's ``__init__`` names what it exports and the module each name comes from; a
module is imported when one of its names is first read, so ``import watchkeeper`` or
``from watchkeeper.runtime import load_settings`` does not import the HTTP API, the
database driver or the supervisor with it. ``from package import name``, attribute
access (also to a submodule, as in ``watchkeeper.triggers`` after ``import
watchkeeper``), ``dir()`` and ``from package import *`` behave as with eager imports.

Every package of the distribution (``triggers``, ``sources``, ``outbox``, ``runtime``
and its subpackages, and ``watchkeeper`` itself) builds its front door with
:func:`lazy_exports`; this module sits at the root so that the pure packages need not
import ``runtime`` for it.

The front doors keep the same names in an ``if TYPE_CHECKING:`` block for type checkers
(``tests/test_front_doors.py`` checks that both lists agree with ``__all__``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports", "submodule"]


def lazy_exports(package: str, namespace: dict[str, Any], sources: Mapping[str, Iterable[str]],
                 renamed: Mapping[str, str] | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``'s front door.

    Args:
        package: the package's ``__name__``.
        namespace: the package's ``globals()``; a name is stored there once imported, so
            the next read is a plain attribute.
        sources: module (absolute, or relative to ``package`` with a leading dot) -> the
            names it provides.
        renamed: exported name -> the name it has in its module, for the few exported
            under another name.
    """
    where = {name: module for module, names in sources.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            return submodule(package, name)
        value = getattr(importlib.import_module(module, package),
                        (renamed or {}).get(name, name))
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__


def submodule(package: str, name: str) -> Any:
    """``package.name`` imported, for an attribute that names a submodule (an eager front
    door had imported its submodules, so ``import watchkeeper`` then
    ``watchkeeper.triggers`` worked, and still does).

    Raises:
        AttributeError: ``name`` is neither an export nor a submodule.
    """
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
