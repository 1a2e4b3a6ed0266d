"""Parsing the options that name Python objects or files: ``--agent NAME=CMD``,
``--agents module:attr``, ``--sources module:attr``, ``--series NAME[@VERSION]=CSV``,
``--schedules module:attr``.
Input parsing only; what is loaded is checked by the objects themselves. The engine's
and the sources' classes are imported by the functions that use them (only the commands
that run something call these)."""

from __future__ import annotations

import importlib
import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from watchkeeper.triggers import SpecError

from ._app import fail_input, series_error

if TYPE_CHECKING:
    from watchkeeper.runtime import AgentCatalog, Registry
    from watchkeeper.sources import SourceRegistry

__all__ = ["agents_from", "schedules_from", "sources_from"]


def model_endpoint() -> Any:
    """The model endpoint ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` configure, or ``None``."""
    if not (os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY")):
        return None  # (checked here so that pydantic-ai is imported only when needed)
    from watchkeeper.runtime import ModelEndpoint
    return ModelEndpoint.from_env()


def agents_from(agents: list[str], target: str | None = None) -> AgentCatalog:
    """A catalog with the built-in digest agent, the model agent when
    ``OPENAI_BASE_URL`` or ``OPENAI_API_KEY`` is set, the Python agents of ``--agents
    module:attr`` (a mapping of name to an object with ``async run(ctx) ->
    AgentResult``, or a callable returning one; default attribute ``AGENTS``), and one
    command agent per ``--agent NAME=COMMAND`` (which wins on a shared name).

    Raises:
        typer.Exit: code 2 naming the option, for a malformed item, a module or attribute
            that cannot be loaded, or something that is not a mapping of agents.
    """
    from watchkeeper.runtime import AgentCatalog, CommandAgent
    from watchkeeper.triggers import MODEL_AGENT

    catalog = AgentCatalog()
    if (endpoint := model_endpoint()) is not None:
        from watchkeeper.runtime import ModelAgent
        catalog.add(MODEL_AGENT, ModelAgent(endpoint))
    if target is not None:
        loaded = _python_agents(target)
        if isinstance(loaded, AgentCatalog):
            catalog.merge(loaded)
        else:
            for name, runner in loaded.items():
                catalog.add(name, runner)
    for item in agents:
        name, sep, command = item.partition("=")
        if not sep or not name or not command:
            raise fail_input(SpecError("--agent", f"{item!r} is not NAME=COMMAND.",
                                       "e.g. --agent research='python research.py'"))
        catalog.add(name, CommandAgent(shlex.split(command)))
    return catalog


def _load(target: str, option: str, default_attr: str, what: str) -> Any:
    """The object ``module:attr`` names (``default_attr`` when no ``:attr``).

    Raises:
        typer.Exit: code 2 naming ``option`` when it cannot be imported or found.
    """
    module_name, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr or default_attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise fail_input(SpecError(option, f"cannot load {target!r}: {exc}.",
                                   f"give module:attribute of {what}.")) from exc


def _python_agents(target: str) -> dict[str, Any] | AgentCatalog:
    """What ``--agents`` names: an :class:`AgentCatalog` as it is; a dict of name ->
    agent; a list of agents, each named by its ``name`` attribute; or a callable
    returning one of these."""
    from watchkeeper.runtime import AgentCatalog
    from watchkeeper.triggers import IDENTIFIER_PATTERN

    value = _load(target, "--agents", "AGENTS", "a dict of name -> agent")
    if callable(value) and not isinstance(value, dict | list | tuple | AgentCatalog):
        value = value()
    if isinstance(value, AgentCatalog):
        return value
    if isinstance(value, list | tuple):
        unnamed = [type(runner).__name__ for runner in value
                   if not isinstance(getattr(runner, "name", None), str)]
        if unnamed:
            raise fail_input(SpecError("--agents", f"{target}: {', '.join(unnamed)} has no name.",
                                       "give each agent in the list a name attribute, or make "
                                       "it a dict {name: agent}."))
        value = {runner.name: runner for runner in value}
    if not isinstance(value, dict):
        raise fail_input(SpecError("--agents", f"{target} is not a mapping of agents.",
                                   "make it a dict {name: agent}, a list of agents with a name "
                                   "attribute, or an AgentCatalog, e.g. {'research': Research()}."))
    problems = [f"{name!r}" for name, runner in value.items()
                if not isinstance(name, str) or not re.fullmatch(IDENTIFIER_PATTERN, name)
                or not callable(getattr(runner, "run", None))]
    if problems:
        raise fail_input(SpecError("--agents", f"{target}: {', '.join(problems)} is not a named "
                                   "agent.", "each name an identifier (letters, digits, _ and -), "
                                   "each agent an object with async run(ctx) -> AgentResult."))
    return value


def sources_from(target: str | None, series: list[str]) -> SourceRegistry:
    """The condition sources of ``run``/``tick``: ``--sources module:attr`` (a
    SourceRegistry, a list of sources, or a callable returning either) and ``--series
    NAME[@VERSION]=CSV`` (a historical series; version 1 unless given).

    Raises:
        typer.Exit: code 2 naming the option.
    """
    from watchkeeper.sources import SeriesError, SeriesSource, Source, SourceRegistry

    found = SourceRegistry()
    if target is not None:
        value = _load(target, "--sources", "SOURCES", "a list of sources")
        value = value() if callable(value) and not isinstance(value, SourceRegistry) else value
        try:
            items = list(value)
        except TypeError:
            items = [None]
        if not all(isinstance(i, Source) for i in items):
            raise fail_input(SpecError("--sources", f"{target} is not a list of sources.",
                                       "each needs name, version and async read(subject, at)."))
        for item in items:
            found.add(item)
    for item in series:
        label, sep, path = item.partition("=")
        name, _, version = label.partition("@")
        if not sep or not name or not path:
            raise fail_input(SpecError("--series", f"{item!r} is not NAME=CSV or NAME@VERSION=CSV.",
                                       "e.g. --series prices@1=prices.csv."))
        if name in found.names():
            raise fail_input(SpecError("--series", f"two sources are named {name!r}.",
                                       "give each series its own name."))
        try:
            found.add(SeriesSource.from_csv(Path(path), name=name, version=version or "1"))
        except SeriesError as exc:
            raise fail_input(series_error(exc)) from exc
        except OSError as exc:
            raise fail_input(SpecError("--series", f"cannot read {path}: {exc.strerror}.",
                                       "check the path.")) from exc
    return found


def schedules_from(target: str | None) -> Registry:
    """Operator definitions from ``--schedules module:attr`` (a list of ScheduleDef, or a
    callable returning one).

    Raises:
        typer.Exit: code 2 naming ``--schedules``.
    """
    from watchkeeper.runtime import Registry, ScheduleDef

    if target is None:
        return Registry()
    value = _load(target, "--schedules", "SCHEDULES", "a list of ScheduleDef")
    items = value() if callable(value) else value
    if not all(isinstance(i, ScheduleDef) for i in items):
        raise fail_input(SpecError("--schedules", f"{target} is not a list of ScheduleDef.",
                                   "see 'Operator-registered definitions' in the README."))
    return Registry(items)
