-- The transactional outbox: one row per event (a record disabled, given up,
-- recovered, re-enabled, paused, resumed or deleted; an upstream breaker
-- opened or closed), written in the transaction of the transition it
-- reports, so an event exists exactly when its transition committed.
-- Notifiers claim pending rows (FOR UPDATE SKIP LOCKED) for a lease:
-- next_at is when a row may be claimed again (after the lease of a
-- notifier that died holding it, or after a retry's delay).
CREATE TABLE bigtable_events (
    id           bigserial PRIMARY KEY,
    type         text NOT NULL CHECK (length(type) BETWEEN 1 AND 64),
    uid          text NOT NULL DEFAULT '',
    at           timestamptz NOT NULL,
    payload      jsonb NOT NULL DEFAULT '{}',
    state        text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    tries        integer NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL,
    claim        text,
    -- destinations already served (opaque keys), so a retry does not send
    -- an event again where it was delivered
    delivered_to text[] NOT NULL DEFAULT '{}',
    last_error   text NOT NULL DEFAULT '',
    done_at      timestamptz
);
-- The claim reads only pending rows, by when they may be claimed.
CREATE INDEX bigtable_events_pending ON bigtable_events (next_at) WHERE state = 'pending';
CREATE INDEX bigtable_events_dead ON bigtable_events (id) WHERE state = 'dead';
CREATE INDEX bigtable_events_uid ON bigtable_events (uid, id);
-- Pruning deletes the oldest first.
CREATE INDEX bigtable_events_at ON bigtable_events (at);
