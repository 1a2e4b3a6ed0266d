-- watchkeeper 0009: server-side sessions of the history page.
--
-- The page's cookie holds a random session id, never a credential; only the SHA-256 of
-- that id is stored here. A session belongs to the user (and the digest of the token
-- they signed in with: a new token no longer matches) or to the operator key that
-- signed in. It ends at expires_at, at sign-out, when its key is revoked or its user's
-- token is replaced (revoked_at); rows past their expiry are deleted at sign-in.

CREATE TABLE page_sessions (
    session_sha256  bytea PRIMARY KEY,
    kind            text NOT NULL CHECK (kind IN ('user', 'operator')),
    tenant_id       text NOT NULL,
    user_id         text,
    token_sha256    bytea,
    key_id          text REFERENCES api_keys (key_id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    last_seen_at    timestamptz NOT NULL,
    revoked_at      timestamptz,
    revoked_why     text,
    FOREIGN KEY (tenant_id, user_id) REFERENCES users (tenant_id, user_id) ON DELETE CASCADE,
    CHECK (CASE kind WHEN 'user' THEN user_id IS NOT NULL AND token_sha256 IS NOT NULL
                                      AND key_id IS NULL
                     ELSE key_id IS NOT NULL AND user_id IS NULL AND token_sha256 IS NULL END),
    CHECK (expires_at > created_at)
);
CREATE INDEX page_sessions_by_user ON page_sessions (tenant_id, user_id) WHERE user_id IS NOT NULL;
CREATE INDEX page_sessions_by_key ON page_sessions (key_id) WHERE key_id IS NOT NULL;
CREATE INDEX page_sessions_by_expiry ON page_sessions (expires_at);
