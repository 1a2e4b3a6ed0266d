-- watchkeeper 0014: the owner may reject a proposed revision.
--
-- A rejected revision never becomes effective; who rejected it and when are kept
-- beside who proposed it (the effective revision, if any, is untouched).

ALTER TABLE definition_revisions DROP CONSTRAINT definition_revisions_status_check;
ALTER TABLE definition_revisions ADD CONSTRAINT definition_revisions_status_check
    CHECK (status IN ('proposed', 'confirmed', 'registered', 'superseded', 'withdrawn',
                      'rejected'));
ALTER TABLE definition_revisions ADD COLUMN rejected_by text;
ALTER TABLE definition_revisions ADD COLUMN rejected_at timestamptz;
