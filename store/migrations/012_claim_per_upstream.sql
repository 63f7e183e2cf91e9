-- The claim takes the due rows of a limited upstream (max_in_flight, rate)
-- by that upstream, at most as many as could start, so that its backlog
-- cannot fill the claim and starve the other upstreams (docs/design.md,
-- U10, U11). Due rows of one upstream, oldest first:
CREATE INDEX bigtables_due_upstream ON bigtables (upstream, refresh_at)
    WHERE attempt_uid IS NULL AND NOT disabled_until_update AND NOT paused AND parked_at IS NULL;
-- Whether an upstream has a limit, as a column: the claim reads it for
-- every due row it passes, and its statistics tell the planner how few
-- limited upstreams there are (a condition on the JSON has none).
ALTER TABLE upstreams ADD COLUMN limited boolean NOT NULL GENERATED ALWAYS AS
    (COALESCE((config->>'max_in_flight')::int, 0) > 0 OR COALESCE((config->>'rate')::float8, 0) > 0) STORED;
-- The limited upstreams whose breaker is closed, read by every claim.
CREATE INDEX upstreams_limited ON upstreams (name) WHERE limited AND breaker = 'closed';
