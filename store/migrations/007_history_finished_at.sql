-- The history's retention deletes attempts older than an age, oldest first,
-- in small batches: this index makes each batch cost its own rows, not a
-- scan of the whole history. Times only grow, so inserts append to its
-- rightmost page.
CREATE INDEX bigtable_attempts_finished ON bigtable_attempts (finished_at);
