"""Read models of definitions: the list with status and next due time, one
definition with its revisions, effective spec and registration, and what every door
shows of one definition (:func:`read_definition`): the effective spec in plain words
with its next occurrences, and a revision awaiting confirmation as its proposal
showed it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from watchkeeper.triggers import PreviewItem, Spec

from .._errors import NotFound
from ..engine._clock import Clock
from ..store._db import Database
from ..store._specs import spec_from_row
from ._access import Capability, authorize, reading_scope
from ._definitions import Proposal
from ._input import check_identifiers
from ._keys import Principal
from ._proposals import PREVIEW_COUNT, ProposalView, describe, preview_spec
from ._reads import on_standby

__all__ = ["DefinitionReading", "DefinitionView", "list_definitions", "read_definition",
           "show_definition", "stored_spec"]


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

    async def read(handle: Database) -> list[dict[str, Any]]:
        return [dict(r) for r in await handle.fetch("definitions_list", tenant_id,
                                                    owner_user_id, *position, limit)]
    return await on_standby(db, read)


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


@dataclass(frozen=True, slots=True)
class DefinitionReading:
    """What every door shows of one definition (:func:`read_definition`).

    Attributes:
        view: the definition row and its revisions.
        spec: the spec the definition shows: the effective one; before the first
            confirmation, the revision awaiting it (``shows_revision`` says which).
        summary: ``spec`` in plain words (:func:`describe`).
        next: its next occurrences with DST notes (none once cancelled or completed).
        proposal: the revision awaiting the owner's confirmation, as its proposal
            showed it (summary, next occurrences, spec, ``spec_hash``, where to
            confirm); ``None`` when nothing awaits.
    """

    view: DefinitionView
    spec: Spec | None
    shows_revision: int | None
    summary: str | None
    next: Sequence[PreviewItem]
    proposal: ProposalView | None

    @property
    def definition(self) -> dict[str, Any]:
        """The ``definitions`` row (with the effective ``spec``, as stored)."""
        return self.view.definition

    @property
    def revisions(self) -> list[dict[str, Any]]:
        """Every revision, oldest first."""
        return self.view.revisions

    @property
    def title(self) -> str | None:
        """The shown spec's title, else the latest revision's."""
        if self.spec is not None:
            return self.spec.title
        return self.revisions[-1]["title"] if self.revisions else None

    def proposal_json(self) -> dict[str, Any] | None:
        """The awaiting revision as its proposal answered it, plus its whole ``spec``,
        ``proposed_by``, ``proposed_at`` and ``confirm`` (where the owner confirms)."""
        if self.proposal is None:
            return None
        revision = next(r for r in self.revisions
                        if r["revision"] == self.proposal.proposal.revision)
        return {**self.proposal.to_json(), "spec": self.proposal.spec.to_json(),
                "proposed_by": revision["proposed_by"], "proposed_at": revision["proposed_at"],
                "confirm": self.proposal.confirm_at()}

    def to_json(self) -> dict[str, Any]:
        """The definition's fields, ``title``, ``trigger``, ``spec``, ``spec_hash``,
        ``shows_revision``, ``summary``, ``next``, ``revisions`` and ``proposal``."""
        spec = None if self.spec is None else self.spec.to_json()
        return {**self.definition, "title": self.title,
                "trigger": None if spec is None else spec["trigger"], "spec": spec,
                "spec_hash": None if self.spec is None else self.spec.spec_hash,
                "shows_revision": self.shows_revision, "summary": self.summary,
                "next": [i.to_json() for i in self.next], "revisions": self.revisions,
                "proposal": self.proposal_json()}


async def read_definition(db: Database, clock: Clock, principal: Principal, definition_id: str,
                          *, count: int = PREVIEW_COUNT) -> DefinitionReading:
    """One definition as ``principal`` may read it, the same at every door (the API's
    ``GET /v1/definitions/{id}``, MCP ``show_agreement``, the page): the effective spec
    in plain words with its next ``count`` occurrences, and the revision that awaits the
    owner's confirmation shown as its proposal showed it (recomputed from now).

    Raises:
        NotFound: no such definition in the principal's tenant (for a user: not theirs).
        Forbidden: the tick secret.
    """
    return await on_standby(db, lambda handle: _read_definition(handle, clock, principal,
                                                                definition_id, count))


async def _read_definition(db: Database, clock: Clock, principal: Principal,
                           definition_id: str, count: int) -> DefinitionReading:
    tenant, _ = reading_scope(principal)
    view = await show_definition(db, tenant, definition_id)
    row = view.definition
    authorize(principal, Capability.READ, tenant_id=row["tenant_id"],
              owner_user_id=row["owner_user_id"])
    now = clock.now()
    pending = await _pending(db, row, now, count)
    if row["spec"] is not None:
        spec: Spec | None = spec_from_row(row)
        assert spec is not None
        upcoming = (preview_spec(spec, now, count)
                    if row["status"] in ("active", "paused") else [])
        return DefinitionReading(view, spec, row["effective_revision"], describe(spec),
                                 upcoming, pending)
    if pending is None:
        return DefinitionReading(view, None, None, None, [], None)
    return DefinitionReading(view, pending.spec, pending.proposal.revision, pending.summary,
                             pending.next, pending)


async def _pending(db: Database, row: dict[str, Any], now: datetime,
                   count: int) -> ProposalView | None:
    """The latest revision when it is an open proposal (the only one a confirmation
    accepts) and the definition is not cancelled."""
    if row["status"] == "cancelled" or not row["latest_revision"]:
        return None
    rev = await db.fetchrow("revision_get", row["tenant_id"], row["definition_id"],
                            row["latest_revision"])
    if rev is None or rev["status"] != "proposed":
        return None
    spec = spec_from_row(rev)
    proposal = Proposal(row["tenant_id"], row["definition_id"], rev["revision"],
                        rev["spec_hash"], True)
    return ProposalView(proposal, spec, describe(spec), preview_spec(spec, now, count))
