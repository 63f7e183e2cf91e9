-- The history's foreign key ran a per-row trigger that looked up and locked
-- the record for every finished attempt: about two thirds of the cost of
-- recording a batch. The store writes history only for records it holds
-- locked in the same transaction, so the record always exists; deleting
-- records still deletes their history, with one statement-level trigger
-- per DELETE instead of one check per inserted attempt.
ALTER TABLE bigtable_attempts DROP CONSTRAINT IF EXISTS bigtable_attempts_uid_fkey;

CREATE FUNCTION bigtables_delete_history() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM bigtable_attempts AS a USING gone AS g WHERE a.uid = g.uid;
    RETURN NULL;
END
$$;

CREATE TRIGGER bigtables_delete_history
    AFTER DELETE ON bigtables
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION bigtables_delete_history();
