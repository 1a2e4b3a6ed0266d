"""API keys and the access policy: agent, app, operator and tick credentials, shown
once, stored hashed, revocable; who may do what, and another tenant's resources are
404, never 403."""

from __future__ import annotations

import hashlib

import pytest
from _helpers import owner

from watchkeeper.runtime import AuthError, Forbidden, NotFound
from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import (
    AgentPrincipal,
    Capability,
    KeyKind,
    OperatorPrincipal,
    TickPrincipal,
    UserPrincipal,
    authenticate_bearer,
    authorize,
    confirm,
    create_key,
    list_keys,
    propose,
    revoke_key,
)
from watchkeeper.triggers import SpecError, parse_spec

pytestmark = pytest.mark.anyio

SPEC = {"version": 1, "trigger": {"type": "cron", "expr": "0 20 * * 3", "zone": "Europe/Paris"}}


async def test_each_kind_authenticates_as_its_principal(db: Database, clock: FakeClock) -> None:
    """An agent, operator and tick key each stand for their principal; the stored row
    holds the SHA-256 of the secret, never the secret; a user token still works."""
    await owner(db, clock)
    agent = await create_key(db, clock, "agent", tenant_id="acme", name="chat")
    operator = await create_key(db, clock, KeyKind.OPERATOR, tenant_id="acme", name="ops")
    tick = await create_key(db, clock, "tick", tenant_id=None, name="cron")
    assert agent.token.startswith(f"wk_agent_{agent.key.key_id}_") and len(agent.token) == 9 + 12 + 1 + 43
    assert await authenticate_bearer(db, clock, agent.token) == AgentPrincipal("acme", agent.key.key_id)
    assert await authenticate_bearer(db, clock, operator.token) == OperatorPrincipal(
        "acme", operator.key.key_id)
    assert await authenticate_bearer(db, clock, tick.token) == TickPrincipal(tick.key.key_id)
    stored = await db.pool.fetchval("SELECT secret_sha256 FROM api_keys WHERE key_id = $1",
                                    agent.key.key_id)
    secret = agent.token.split("_", 3)[3]
    assert bytes(stored) == hashlib.sha256(secret.encode()).digest()
    assert secret not in str(await db.pool.fetch("SELECT * FROM api_keys"))
    assert {k.key_id for k in await list_keys(db, "acme")} == {agent.key.key_id, operator.key.key_id}


async def test_wrong_revoked_and_misused_credentials_are_refused(db: Database,
                                                                 clock: FakeClock) -> None:
    """A changed secret, a kind that does not match the key, a revoked key, no token and
    On-Behalf-Of with anything but an app key: AuthError, each time."""
    await owner(db, clock)
    agent = await create_key(db, clock, "agent", tenant_id="acme", name="chat")
    flipped = agent.token[:-1] + ("A" if agent.token[-1] != "A" else "B")
    relabelled = agent.token.replace("wk_agent_", "wk_operator_", 1)
    for token in (flipped, relabelled, None, "", "wk_agent_000000000000_" + "x" * 43):
        with pytest.raises(AuthError):
            await authenticate_bearer(db, clock, token)
    with pytest.raises(AuthError, match="app key only"):
        await authenticate_bearer(db, clock, agent.token, on_behalf_of="alice")
    await revoke_key(db, clock, agent.key.key_id, tenant_id="acme")
    with pytest.raises(AuthError, match="revoked"):
        await authenticate_bearer(db, clock, agent.token)
    with pytest.raises(NotFound):
        await revoke_key(db, clock, agent.key.key_id)


async def test_an_app_key_acts_for_the_user_it_names(db: Database, clock: FakeClock) -> None:
    """An app key with On-Behalf-Of acts as that user of its tenant; the confirmation
    records who confirmed and through which key; no user, or a user of another tenant,
    is refused."""
    await owner(db, clock)
    await owner(db, clock, tenant="globex", user="gus")
    app = await create_key(db, clock, "app", tenant_id="acme", name="backend")
    with pytest.raises(AuthError, match="On-Behalf-Of"):
        await authenticate_bearer(db, clock, app.token)
    with pytest.raises(AuthError, match="no user 'gus'"):
        await authenticate_bearer(db, clock, app.token, on_behalf_of="gus")
    alice = await authenticate_bearer(db, clock, app.token, on_behalf_of="alice")
    assert alice == UserPrincipal("acme", "alice", via=f"app key {app.key.key_id}")
    spec = parse_spec(SPEC)
    proposal = await propose(db, clock, tenant_id="acme", definition_id="h", owner_user_id="alice",
                             spec=spec, proposed_by="agent:test")
    assert isinstance(alice, UserPrincipal)
    await confirm(db, clock, alice, definition_id="h", revision=proposal.revision,
                  spec_hash=proposal.spec_hash)
    assert await db.pool.fetchval("SELECT confirmed_by FROM definition_revisions") == (
        f"user:acme/alice via app key {app.key.key_id}")


async def test_keys_are_created_only_where_they_belong(db: Database, clock: FakeClock) -> None:
    """A tick key has no tenant, the others need one that exists; an unknown kind and a
    bad name are refused with the field."""
    await owner(db, clock)
    for kind, tenant, field in (("tick", "acme", "tenant"), ("agent", None, "tenant"),
                                ("robot", "acme", "kind"), ("agent", "acme", "name")):
        with pytest.raises(SpecError) as raised:
            await create_key(db, clock, kind, tenant_id=tenant,
                             name="bad name" if field == "name" else "k")
        assert raised.value.field == field
    with pytest.raises(NotFound):
        await create_key(db, clock, "agent", tenant_id="nosuch", name="k")


AGENT = AgentPrincipal("acme", "k1")
ALICE = UserPrincipal("acme", "alice")
OPERATOR = OperatorPrincipal("acme", "k2")
TICK = TickPrincipal("k3")
ALLOWED = {
    Capability.PREVIEW: {"agent", "user", "operator"},
    Capability.PROPOSE: {"agent", "user", "operator"},
    Capability.READ: {"agent", "user", "operator"},
    Capability.CONFIRM: {"user"},
    Capability.CONTROL: {"user", "operator"},
    Capability.PREFERENCES: {"user", "operator"},
    Capability.OPERATE: {"operator"},
    Capability.TICK: {"tick"},
}


@pytest.mark.parametrize("capability", list(Capability))
@pytest.mark.parametrize(("principal", "kind"), [(AGENT, "agent"), (ALICE, "user"),
                                                 (OPERATOR, "operator"), (TICK, "tick")])
def test_the_policy_matrix(capability: Capability, principal: object, kind: str) -> None:
    """Own tenant: allowed exactly as DESIGN's table says, else Forbidden. Another
    tenant's resource: NotFound, whatever the capability; another user's definition is
    NotFound for a user and visible to the agent and the operator."""
    def check(**scope: str) -> type[Exception] | None:
        try:
            authorize(principal, capability, **scope)  # type: ignore[arg-type]
        except (NotFound, Forbidden) as exc:
            return type(exc)
        return None

    own = None if kind in ALLOWED[capability] else Forbidden
    if kind == "tick":
        assert check() is own
        assert check(tenant_id="acme") is NotFound
        return
    assert check(tenant_id="acme") is own
    assert check(tenant_id="globex") is NotFound
    assert check(tenant_id="acme", owner_user_id="alice") is own
    assert check(tenant_id="acme", owner_user_id="bob") is (NotFound if kind == "user" else own)


@pytest.mark.parametrize("suffix", ["\n", "\r\n", " ", "\x00"])
async def test_a_key_with_anything_after_it_is_refused(db: Database, clock: FakeClock,
                                                       suffix: str) -> None:
    """A key's token is matched whole: the token followed by a newline (which '$' let
    through) is an unknown credential, and the key itself still works."""
    await owner(db, clock)
    agent = await create_key(db, clock, "agent", tenant_id="acme", name="chat")
    with pytest.raises(AuthError, match="unknown"):
        await authenticate_bearer(db, clock, agent.token + suffix)
    assert await authenticate_bearer(db, clock, agent.token) == AgentPrincipal(
        "acme", agent.key.key_id)
