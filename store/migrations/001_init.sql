-- One row per BigTable: its definition, its policy and its refresh state.
-- Column names are those of docs/design.md, "The state of a record".
CREATE TABLE bigtables (
    uid                   text PRIMARY KEY CHECK (length(uid) BETWEEN 1 AND 200),
    input_url             text NOT NULL CHECK (length(input_url) BETWEEN 1 AND 2048),
    schedule              text NOT NULL DEFAULT '',
    policy                jsonb NOT NULL,
    refresh_at            timestamptz,
    attempt_uid           text,
    attempt_no            integer NOT NULL DEFAULT 0 CHECK (attempt_no >= 0),
    started_at            timestamptz,
    deadline_at           timestamptz,
    failing_since         timestamptz,
    disabled_until_update boolean NOT NULL DEFAULT false,
    disabled_reason       text,
    status_message        text,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT running_attempt_has_deadline CHECK ((attempt_uid IS NULL) = (deadline_at IS NULL)),
    CONSTRAINT disabled_has_reason CHECK (NOT disabled_until_update OR disabled_reason IS NOT NULL)
);

-- Due rows: the scheduler's claim reads only these, so a tick costs the rows
-- due, not the rows stored.
CREATE INDEX bigtables_due ON bigtables (refresh_at)
    WHERE attempt_uid IS NULL AND NOT disabled_until_update;
-- Running attempts, by deadline, for timeouts.
CREATE INDEX bigtables_running ON bigtables (deadline_at)
    WHERE attempt_uid IS NOT NULL;
CREATE INDEX bigtables_disabled ON bigtables (uid)
    WHERE disabled_until_update;

-- One row per finished attempt. The primary key makes applying one attempt
-- twice impossible.
CREATE TABLE bigtable_attempts (
    attempt_uid text PRIMARY KEY,
    uid         text NOT NULL REFERENCES bigtables (uid) ON DELETE CASCADE,
    attempt_no  integer NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('success', 'failure', 'timeout', 'cancelled')),
    message     text NOT NULL DEFAULT '',
    decision    text NOT NULL DEFAULT ''
);
CREATE INDEX bigtable_attempts_uid ON bigtable_attempts (uid, finished_at DESC);
