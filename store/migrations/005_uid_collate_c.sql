-- Record and attempt ids are identifiers, compared and ordered byte by byte:
-- the "C" collation makes every index probe and insert on them a memcmp
-- instead of a locale-aware comparison (strcoll), which is several times
-- slower under locales such as en_US.UTF-8. Lists page in byte order, the
-- order Go sorts strings in. The indexes on these columns are rebuilt once.
ALTER TABLE bigtables ALTER COLUMN uid TYPE text COLLATE "C";
ALTER TABLE bigtable_attempts
    ALTER COLUMN uid TYPE text COLLATE "C",
    ALTER COLUMN attempt_uid TYPE text COLLATE "C";
