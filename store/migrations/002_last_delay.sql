-- The delay chosen after the previous failure: decorrelated jitter grows
-- from it. Milliseconds; 0 while healthy.
ALTER TABLE bigtables ADD COLUMN last_delay_ms bigint NOT NULL DEFAULT 0 CHECK (last_delay_ms >= 0);
