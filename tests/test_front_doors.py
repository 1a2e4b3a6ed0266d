"""The packages' front doors import their names on first use (PEP 562) and export what
they did when they imported everything at once.

Each front door lists its names twice: in imports (at the top for the few it imports
at once, under ``if TYPE_CHECKING:`` for the others, which type checkers read) and in
the map its ``__getattr__`` reads. These tests hold the two together and to
``__all__``, and check in fresh interpreters that importing a front door imports
nothing heavy.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

FRONT_DOORS = ("watchkeeper", "watchkeeper.runtime", "watchkeeper.runtime.usecases",
               "watchkeeper.runtime.store", "watchkeeper.triggers", "watchkeeper.outbox")


def declared(package: str) -> dict[str, tuple[str, str]]:
    """Name -> (module, attribute) of each ``from M import A as NAME`` at the top of
    ``package``'s ``__init__``, in its body or under ``if TYPE_CHECKING:``."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    statements: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            statements.extend(node.body)
        else:
            statements.append(node)
    found: dict[str, tuple[str, str]] = {}
    for node in statements:
        if isinstance(node, ast.ImportFrom):
            module = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            for alias in node.names:
                if alias.asname is not None:  # a re-export (``X as X``)
                    assert alias.asname not in found, f"{package}: {alias.asname} twice"
                    found[alias.asname] = (module, alias.name)
    return found


@pytest.mark.parametrize("package", FRONT_DOORS)
def test_a_front_door_exports_its_names(package: str) -> None:
    """Every name of ``__all__`` is declared once (a declared name may be left out of
    ``__all__``, as ``triggers.check_currency`` always was), and each declared name reads
    as the object of the module its import names; ``dir()`` and ``import *`` see them
    all; an unknown name is an AttributeError (an ImportError to ``from ... import``)."""
    module = importlib.import_module(package)
    names = declared(package)
    assert len(set(module.__all__)) == len(module.__all__)
    assert set(module.__all__) <= set(names)
    for name, (source, attribute) in names.items():
        assert getattr(module, name) is getattr(importlib.import_module(source), attribute), name
    assert set(names) <= set(dir(module))
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)  # noqa: S102
    assert set(module.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        exec(f"from {package} import no_such_name", {})  # noqa: S102


def test_submodules_are_attributes_as_before() -> None:
    """After ``import watchkeeper`` its packages are attributes, as when the front door
    imported them all; so are the runtime's rooms."""
    code = ("import watchkeeper\n"
            "print(watchkeeper.triggers.parse_spec.__module__, watchkeeper.sources.__name__,\n"
            "      watchkeeper.outbox.Notice.__module__,\n"
            "      watchkeeper.runtime.usecases.load_spec.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["watchkeeper.triggers._spec", "watchkeeper.sources",
                   "watchkeeper.outbox._channels", "watchkeeper.runtime.usecases._specfile"]


HEAVY = ("fastapi", "uvicorn", "mcp", "pydantic_ai", "jinja2", "prometheus_client", "asyncpg",
         "httpx", "pydantic_settings")


@pytest.mark.parametrize(("code", "absent"), [
    ("import watchkeeper", HEAVY + ("pydantic", "watchkeeper.triggers", "watchkeeper.runtime.engine")),
    ("import watchkeeper.runtime, watchkeeper.triggers, watchkeeper.outbox", HEAVY + ("pydantic",)),
    ("from watchkeeper import SpecError, NotFound", HEAVY + ("pydantic",)),
    ("from watchkeeper import parse_spec, preview", HEAVY + ("watchkeeper.runtime.engine",)),
    ("from watchkeeper.runtime import load_settings", HEAVY[:-1] + ("watchkeeper.runtime.engine",)),
    ("from watchkeeper.runtime.usecases import load_spec", HEAVY + ("watchkeeper.runtime.engine",)),
])
def test_a_front_door_imports_only_what_is_read(code: str, absent: tuple[str, ...]) -> None:
    """In a fresh interpreter, a name costs its own module and what that imports: the
    package alone imports none of the runtime, a spec function not the database."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True)
    modules = set(json.loads(result.stdout))
    assert modules & set(absent) == set()
    assert "watchkeeper" in modules
