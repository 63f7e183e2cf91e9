-- Upstreams: every record belongs to one (the host of its input_url, or a
-- name a person gave), and the records of an upstream share its circuit
-- breaker and limits (docs/design.md, "Upstreams").
ALTER TABLE bigtables ADD COLUMN upstream text NOT NULL DEFAULT '';
-- Set while the record is due but held back by its upstream's open breaker:
-- no attempt is burned, attempt_no and refresh_at are kept.
ALTER TABLE bigtables ADD COLUMN parked_at timestamptz;
UPDATE bigtables SET upstream = COALESCE(lower(substring(input_url FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]+)')), input_url);

-- Parked rows leave the due index: the claim never reads them, so a dead
-- upstream's backlog does not slow the others.
DROP INDEX bigtables_due;
CREATE INDEX bigtables_due ON bigtables (refresh_at)
    WHERE attempt_uid IS NULL AND NOT disabled_until_update AND NOT paused AND parked_at IS NULL;
-- Release, oldest first, per upstream.
CREATE INDEX bigtables_parked ON bigtables (upstream, refresh_at) WHERE parked_at IS NOT NULL;
-- Attempts in flight per upstream (max_in_flight).
CREATE INDEX bigtables_running_upstream ON bigtables (upstream) WHERE attempt_uid IS NOT NULL;
DROP INDEX bigtables_idle;
CREATE INDEX bigtables_idle ON bigtables (uid)
    WHERE refresh_at IS NULL AND attempt_uid IS NULL AND NOT disabled_until_update AND NOT paused AND parked_at IS NULL;

-- One row per upstream that was configured or whose breaker counted an
-- attempt; an upstream without a row has the default configuration and a
-- closed breaker. Rows are locked after the records' rows, in name order.
CREATE TABLE upstreams (
    name              text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 300),
    config            jsonb NOT NULL DEFAULT '{}',
    configured        boolean NOT NULL DEFAULT false,
    breaker           text NOT NULL DEFAULT 'closed' CHECK (breaker IN ('closed', 'open', 'half_open')),
    failures          integer NOT NULL DEFAULT 0,
    window_start      timestamptz,
    window_attempts   integer NOT NULL DEFAULT 0,
    window_failures   integer NOT NULL DEFAULT 0,
    prev_attempts     integer NOT NULL DEFAULT 0,
    prev_failures     integer NOT NULL DEFAULT 0,
    opens             integer NOT NULL DEFAULT 0,
    next_probe        timestamptz,
    probes_left       integer NOT NULL DEFAULT 0,
    tokens            double precision NOT NULL DEFAULT 0,
    tokens_at         timestamptz,
    releasing         boolean NOT NULL DEFAULT false,
    released_at       timestamptz,
    blocked_until     timestamptz,
    changed_at        timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now()
);
-- The scheduler wakes these each tick: open or half-open breakers and
-- releases in progress.
CREATE INDEX upstreams_waking ON upstreams (name) WHERE breaker <> 'closed' OR releasing;
