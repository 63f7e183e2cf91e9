-- One index instead of two on the attempt history: the primary key
-- (uid, attempt_uid) still makes recording an attempt twice impossible (an
-- attempt belongs to one record) and serves the per-record history; the
-- poller writes one index entry per finished attempt instead of two.
ALTER TABLE bigtable_attempts DROP CONSTRAINT bigtable_attempts_pkey;
DROP INDEX bigtable_attempts_uid;
ALTER TABLE bigtable_attempts ADD PRIMARY KEY (uid, attempt_uid);
