-- watchkeeper 0004: API keys for the HTTP API and the MCP tools.
--
-- A key is shown once (wk_<kind>_<key_id>_<secret>) and stored as the SHA-256 of its
-- secret; a request is authenticated by looking the key up by its public key_id and
-- comparing digests in constant time. Kinds (DESIGN "Who may do what"): an agent key
-- and an app key and an operator key belong to one tenant; the tick secret drives one
-- tick and belongs to none. Revoked keys stay, for the audit trail of what they did.

CREATE TABLE api_keys (
    key_id         text PRIMARY KEY,
    kind           text NOT NULL CHECK (kind IN ('agent', 'app', 'operator', 'tick')),
    tenant_id      text REFERENCES tenants (tenant_id),
    name           text NOT NULL,
    secret_sha256  bytea NOT NULL,
    created_at     timestamptz NOT NULL,
    created_by     text NOT NULL,
    revoked_at     timestamptz,
    last_used_at   timestamptz,
    CHECK ((kind = 'tick') = (tenant_id IS NULL))
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, kind);

-- The last pause / resume / cancel: who did it and why (Temporal's pause carries a note).
ALTER TABLE definitions
    ADD COLUMN status_note text NOT NULL DEFAULT '',
    ADD COLUMN status_by   text;
