"""Read models of definitions: the list with status and next due time, and one
definition with its revisions, effective spec and registration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from watchkeeper.triggers import Spec

from .._errors import NotFound
from ..store._db import Database
from ..store._specs import spec_from_row
from ._input import check_identifiers

__all__ = ["DefinitionView", "list_definitions", "show_definition", "stored_spec"]


@dataclass(frozen=True, slots=True)
class DefinitionView:
    """One definition (``definitions`` row with its effective ``spec``, ``spec_hash``
    and ``registration``) and every revision (number, status, hash, who proposed and
    confirmed it, when), oldest first."""

    definition: dict[str, Any]
    revisions: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        """The definition's fields plus ``revisions``."""
        return {**self.definition, "revisions": self.revisions}


async def list_definitions(db: Database, tenant_id: str | None = None, *,
                           owner_user_id: str | None = None,
                           after: tuple[str, str] | None = None,
                           limit: int | None = None) -> list[dict[str, Any]]:
    """Definitions of a tenant (or all; of one owner, with ``owner_user_id``), by tenant
    and id, strictly after the keyset position ``after`` = (tenant_id, definition_id),
    at most ``limit`` (all when ``None``): origin, owner, status, fence, latest and
    effective revision, next due time (UTC), slots seen, title, trigger."""
    position = after or (None, None)
    return [dict(r) for r in await db.fetch("definitions_list", tenant_id, owner_user_id,
                                            *position, limit)]


async def show_definition(db: Database, tenant_id: str, definition_id: str) -> DefinitionView:
    """One definition and its revisions.

    Raises:
        NotFound: no such definition in ``tenant_id`` (operator-registered ones live in
            the tenant ``_operator``).
        SpecError: ``definition_id`` is not an identifier.
    """
    check_identifiers({"definition_id": definition_id})
    row = await db.fetchrow("definition_get", tenant_id, definition_id)
    if row is None:
        raise NotFound(f"no definition {tenant_id}/{definition_id}")
    revisions = [dict(r) for r in await db.fetch("revisions_list", tenant_id, definition_id)]
    return DefinitionView(dict(row), revisions)


def stored_spec(row: dict[str, Any]) -> Spec:
    """The effective spec of a definition row from :func:`show_definition` (a stored
    spec: read back as it was confirmed)."""
    return spec_from_row(row)
