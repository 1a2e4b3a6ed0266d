-- watchkeeper 0013: every key of a tenant table includes tenant_id (docs/SCALE.md).
--
-- On Citus a tenant table is distributed by tenant_id, and a primary key or unique
-- constraint of a distributed table must include the distribution column (a shard
-- enforces it alone). Two keys did not: a user's token digest (unique across all
-- tenants) and a page session's id digest. Each keeps its digest first, so the
-- lookup by digest alone (user_by_token, page_session_use) still walks the same index;
-- the digests are SHA-256 of 256-bit random secrets, so uniqueness per tenant loses
-- nothing in practice. No column and no query changes.
ALTER TABLE users DROP CONSTRAINT users_token_sha256_key,
    ADD CONSTRAINT users_token_sha256_key UNIQUE (token_sha256, tenant_id);
ALTER TABLE page_sessions DROP CONSTRAINT page_sessions_pkey,
    ADD CONSTRAINT page_sessions_pkey PRIMARY KEY (session_sha256, tenant_id);

-- An operator's page session references its API key (a reference table on Citus) by
-- key and tenant: the session's tenant is the key's, now a constraint, and the foreign
-- key includes tenant_id like every other of a tenant table.
ALTER TABLE api_keys ADD CONSTRAINT api_keys_key_id_tenant_id_key UNIQUE (key_id, tenant_id);
ALTER TABLE page_sessions DROP CONSTRAINT page_sessions_key_id_fkey,
    ADD CONSTRAINT page_sessions_key_id_fkey FOREIGN KEY (key_id, tenant_id)
        REFERENCES api_keys (key_id, tenant_id) ON DELETE CASCADE;
