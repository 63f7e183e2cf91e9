-- When the status_message was drained from the output list, in Redis's
-- time: a status drained before the stored one (a batch replayed after a
-- crash, or adopted from a dead poller) is older and is not applied over it.
ALTER TABLE bigtables ADD COLUMN status_at timestamptz;
