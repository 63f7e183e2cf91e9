-- A paused record is held by a person: never started until resumed, and
-- distinct from disabled (which a final failure sets and an update clears).
ALTER TABLE bigtables ADD COLUMN paused boolean NOT NULL DEFAULT false;
-- The claim skips paused rows without reading them: the due index leaves
-- them out.
DROP INDEX bigtables_due;
CREATE INDEX bigtables_due ON bigtables (refresh_at)
    WHERE attempt_uid IS NULL AND NOT disabled_until_update AND NOT paused;
-- Operators' counts and lists (stats, list --phase/--failing) read these
-- small partial indexes instead of the table: each holds only the rows of
-- its kind, in uid order for keyset paging.
CREATE INDEX bigtables_paused ON bigtables (uid) WHERE paused;
CREATE INDEX bigtables_failing ON bigtables (uid) WHERE failing_since IS NOT NULL;
CREATE INDEX bigtables_idle ON bigtables (uid)
    WHERE refresh_at IS NULL AND attempt_uid IS NULL AND NOT disabled_until_update AND NOT paused;
