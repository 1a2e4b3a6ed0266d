"""Definitions and revisions: propose, confirm with the hash you saw, optimistic
concurrency, descriptive edits, pause / resume / cancel and their fences."""

from __future__ import annotations

import pytest
from _helpers import confirmed, definition, events, occurrences, owner, tasks, utc

from watchkeeper.runtime._errors import AuthError, Conflict, NotFound
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import (
    OPERATOR,
    add_user,
    authenticate,
    cancel,
    confirm,
    pause,
    propose,
    resume,
)
from watchkeeper.triggers import SpecError, parse_spec

pytestmark = pytest.mark.anyio

DAILY = {"version": 1, "trigger": {"type": "cron", "expr": "0 20 * * 3", "zone": "Europe/Paris"},
         "title": "Wednesday holdings review"}


async def test_a_proposal_runs_nothing_until_the_owner_confirms(db: Database) -> None:
    """Proposed revisions create no tasks; confirmation makes the revision effective."""
    clock = FakeClock(utc("2026-12-01T00:00:00Z"))
    me = await owner(db, clock)
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                             spec=parse_spec(DAILY), proposed_by="agent:chat")
    clock.set_wall(utc("2026-12-09T20:00:00Z"))
    assert (await tick(db, clock)).planned == 0
    row = await definition(db)
    assert (row["status"], row["effective_revision"], row["fence"]) == ("proposed", None, 0)
    done = await confirm(db, clock, me, definition_id="d1", revision=1,
                         spec_hash=proposal.spec_hash)
    assert (done.revision, done.fence) == (1, 1)
    assert done.next_due_at == utc("2026-12-09T19:00:00Z") + (utc("2026-12-16T00:00Z")
                                                              - utc("2026-12-09T00:00Z"))


async def test_confirming_needs_the_hash_that_was_shown(db: Database) -> None:
    """A wrong spec_hash is a conflict and changes nothing."""
    clock = FakeClock(utc("2026-12-01T00:00:00Z"))
    me = await owner(db, clock)
    await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                  spec=parse_spec(DAILY), proposed_by="agent:chat")
    with pytest.raises(Conflict, match="spec hash mismatch"):
        await confirm(db, clock, me, definition_id="d1", revision=1, spec_hash="0" * 64)
    assert (await definition(db))["effective_revision"] is None


async def test_only_the_owner_confirms(db: Database) -> None:
    """Another user of the same tenant cannot confirm (for them the definition does not
    exist: not found); an unknown token is not authenticated."""
    clock = FakeClock(utc("2026-12-01T00:00:00Z"))
    await owner(db, clock)
    mallory = await authenticate(db, await add_user(db, clock, "acme", "mallory"))
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                             spec=parse_spec(DAILY), proposed_by="agent:chat")
    with pytest.raises(NotFound):
        await confirm(db, clock, mallory, definition_id="d1", revision=1,
                      spec_hash=proposal.spec_hash)
    with pytest.raises(AuthError):
        await authenticate(db, "wk_not-a-token")
    with pytest.raises(AuthError):
        await authenticate(db, None)


async def test_a_stale_edit_is_rejected_as_a_conflict(db: Database) -> None:
    """Two editors based on revision 1: the second, now stale, is refused; nothing is lost."""
    clock = FakeClock(utc("2026-12-01T00:00:00Z"))
    await owner(db, clock)
    await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                  spec=parse_spec(DAILY), proposed_by="agent:chat")
    edit = parse_spec({**DAILY, "instructions": "editor A"})
    await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                  spec=edit, proposed_by="agent:A", based_on=1)
    with pytest.raises(Conflict, match="at revision 2; your edit is based on 1"):
        await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                      spec=parse_spec({**DAILY, "instructions": "editor B"}),
                      proposed_by="agent:B", based_on=1)
    revisions = await db.pool.fetch("SELECT revision, proposed_by FROM definition_revisions "
                                    "ORDER BY revision")
    assert [tuple(r) for r in revisions] == [(1, "agent:chat"), (2, "agent:A")]


async def test_a_newer_proposal_does_not_disturb_the_effective_revision(db: Database) -> None:
    """Revision 2 waits for confirmation while revision 1 keeps running; tasks keep
    the revision they were admitted under."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    me = await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600},
                                     "overrun": "allow"})
    edited = parse_spec({"version": 1, "trigger": {"type": "interval", "every": 1800},
                         "overrun": "allow"})
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                             spec=edited, proposed_by="agent:chat", based_on=1)
    clock.set_wall(utc("2026-06-01T01:00:00Z"))
    await tick(db, clock)
    await confirm(db, clock, me, definition_id="d1", revision=2, spec_hash=proposal.spec_hash)
    clock.set_wall(utc("2026-06-01T01:30:00Z"))
    await tick(db, clock)
    assert [(t["slot"], t["revision"]) for t in await tasks(db)] == [
        ("2026-06-01T01:00:00Z", 1), ("2026-06-01T01:30:00Z", 2)]
    statuses = await db.pool.fetch("SELECT revision, status FROM definition_revisions ORDER BY 1")
    assert [tuple(r) for r in statuses] == [(1, "superseded"), (2, "confirmed")]


async def test_a_descriptive_edit_needs_no_confirmation(db: Database) -> None:
    """Changing only the title keeps the spec hash and takes effect at once, same fence."""
    clock = FakeClock(utc("2026-12-01T00:00:00Z"))
    await confirmed(db, clock, {k: v for k, v in DAILY.items() if k != "version"})
    renamed = parse_spec({**DAILY, "title": "Holdings (renamed)", "notes": "for Q1"})
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                             spec=renamed, proposed_by="agent:chat", based_on=1)
    assert proposal.needs_confirmation is False
    row = await definition(db)
    assert (row["effective_revision"], row["fence"]) == (2, 1)


async def test_bad_input_is_refused_and_loses_nothing(db: Database) -> None:
    """Unknown owner, reserved tenant and a cancelled definition are refused; stored rows stay."""
    clock = FakeClock(utc("2026-12-01T00:00:00Z"))
    await confirmed(db, clock, {k: v for k, v in DAILY.items() if k != "version"})
    with pytest.raises(NotFound, match="users add acme bob"):
        await propose(db, clock, tenant_id="acme", definition_id="d2", owner_user_id="bob",
                      spec=parse_spec(DAILY), proposed_by="agent:chat")
    with pytest.raises(SpecError, match="tenant_id"):
        await add_user(db, clock, "_operator", "x")
    await cancel(db, clock, OPERATOR, "acme", "d1")
    with pytest.raises(Conflict, match="cancelled"):
        await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                      spec=parse_spec(DAILY), proposed_by="agent:chat", based_on=1)
    assert await db.pool.fetchval("SELECT count(*) FROM definition_revisions") == 1
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 1


async def test_every_state_change_increments_the_fence(db: Database) -> None:
    """confirm 1, pause 2, resume 3, cancel 4."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    me = await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600}})
    assert await pause(db, clock, me, "acme", "d1") == 2
    assert await resume(db, clock, me, "acme", "d1") == 3
    assert await cancel(db, clock, OPERATOR, "acme", "d1") == 4
    with pytest.raises(Conflict):
        await pause(db, clock, me, "acme", "d1")


async def test_pause_records_the_span_once_and_never_replays_it(db: Database) -> None:
    """Paused from 00:30 to 05:15: 01:00..05:00 is one skipped_paused range; the next
    occurrence is 06:00; nothing from the span is admitted."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    me = await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600},
                                     "overrun": "allow"})
    clock.set_wall(utc("2026-06-01T00:00:05Z"))
    await tick(db, clock)
    clock.set_wall(utc("2026-06-01T00:30:00Z"))
    await pause(db, clock, me, "acme", "d1")
    clock.set_wall(utc("2026-06-01T03:00:00Z"))
    assert (await tick(db, clock)).planned == 0
    clock.set_wall(utc("2026-06-01T05:15:00Z"))
    await resume(db, clock, me, "acme", "d1")
    (event,) = await events(db)
    assert (event["kind"], event["first_slot"], event["last_slot"], event["count"]) == (
        "skipped_paused", "2026-06-01T01:00:00Z", "2026-06-01T05:00:00Z", 5)
    assert (await definition(db))["next_due_at"] == utc("2026-06-01T06:00:00Z")
    clock.set_wall(utc("2026-06-01T06:00:01Z"))
    await tick(db, clock)
    assert [o["slot"] for o in await occurrences(db)] == ["2026-06-01T00:00:00Z",
                                                        "2026-06-01T06:00:00Z"]


async def test_pause_does_not_cancel_a_pending_task_but_cancel_does(db: Database) -> None:
    """Pause leaves the admitted task; cancel ends it."""
    clock = FakeClock(utc("2026-06-01T00:00:00Z"))
    me = await confirmed(db, clock, {"trigger": {"type": "interval", "every": 3600}})
    await tick(db, clock)
    await pause(db, clock, me, "acme", "d1")
    assert [t["status"] for t in await tasks(db)] == ["pending"]
    await cancel(db, clock, me, "acme", "d1")
    assert [t["status"] for t in await tasks(db)] == ["cancelled"]


async def test_confirming_a_one_shot_in_the_past_is_refused(db: Database) -> None:
    """An at-trigger whose instant has passed cannot become effective."""
    clock = FakeClock(utc("2026-12-03T00:00:00Z"))
    me = await owner(db, clock)
    spec = parse_spec({"version": 1, "trigger": {"type": "at", "at": "2026-12-02T20:00",
                                                 "zone": "Europe/Paris"}})
    proposal = await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                             spec=spec, proposed_by="agent:chat")
    with pytest.raises(Conflict, match="no occurrence after"):
        await confirm(db, clock, me, definition_id="d1", revision=1, spec_hash=proposal.spec_hash)


async def test_an_edit_must_name_its_base_revision(db: Database) -> None:
    """Proposing again without based_on says which revision to base it on."""
    clock = FakeClock(utc("2026-12-01T00:00:00Z"))
    await owner(db, clock)
    await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                  spec=parse_spec(DAILY), proposed_by="agent:chat")
    with pytest.raises(Conflict, match="propose again based on revision 1"):
        await propose(db, clock, tenant_id="acme", definition_id="d1", owner_user_id="alice",
                      spec=parse_spec(DAILY), proposed_by="agent:chat")


async def test_a_new_definition_cannot_be_based_on_a_revision(db: Database) -> None:
    """based_on for an id that has no revision yet is a conflict (nothing is stored),
    not silently ignored."""
    clock = FakeClock(utc("2026-12-01T00:00:00Z"))
    await owner(db, clock)
    with pytest.raises(Conflict, match="has no revision yet; your proposal is based on 7"):
        await propose(db, clock, tenant_id="acme", definition_id="fresh", owner_user_id="alice",
                      spec=parse_spec(DAILY), proposed_by="agent:chat", based_on=7)
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 0
