-- The token of the push that carries a running attempt's job (the tick's
-- push token, see queue.PushJobsOnce). An attempt whose token never landed
-- in Redis had no job: at its deadline it is started again instead of
-- timed out (docs/design.md, T8). NULL when no attempt runs, and for
-- attempts started before this column existed (they time out as before).
ALTER TABLE bigtables ADD COLUMN push_token text;
