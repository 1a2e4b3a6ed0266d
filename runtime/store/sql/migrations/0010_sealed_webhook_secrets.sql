-- watchkeeper 0010: webhook signing secrets sealed at rest (envelope encryption).
--
-- A secret is stored as `sealed` (AES-256-GCM under a data key of its own) with that
-- data key wrapped under the key kept outside the database (`data_key`, `key_id`):
-- WATCHKEEPER_SECRET_KEY or <WATCHKEEPER_HOME>/secret.key. SQL cannot encrypt under a
-- key it does not have, so this migration only makes room: the secrets already stored
-- stay in `secret` for the moment, and the process that applied it seals each of them
-- (and clears `secret`) right after migrating, before it does anything else; every
-- process does the same at start, so an unsealed row does not survive a start. New
-- secrets are written sealed only. (Clear text of replaced row versions stays on disk
-- until VACUUM reclaims them.)

ALTER TABLE webhook_secrets
    DROP CONSTRAINT webhook_secrets_secret_check,
    ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN sealed    bytea,
    ADD COLUMN data_key  bytea,
    ADD COLUMN key_id    text,
    ADD CONSTRAINT webhook_secrets_secret_check CHECK (secret IS NULL OR secret LIKE 'whsec_%'),
    ADD CONSTRAINT webhook_secrets_sealed_or_clear CHECK (
        (sealed IS NOT NULL AND data_key IS NOT NULL AND key_id IS NOT NULL AND secret IS NULL)
        OR (sealed IS NULL AND data_key IS NULL AND key_id IS NULL AND secret IS NOT NULL));

-- The rows left to seal, found without a scan once most are sealed.
CREATE INDEX webhook_secrets_unsealed ON webhook_secrets (tenant_id, endpoint, secret_id)
    WHERE sealed IS NULL;
