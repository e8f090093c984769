-- Failed logins per e-mail address (lower-cased), whether or not an account has it, so that
-- repeated failures hold further attempts (docs/users.md, "Login"). A successful login deletes the
-- row. Times are milliseconds since the Unix epoch.

CREATE TABLE login_failures (
    email               TEXT    PRIMARY KEY,
    failures            BIGINT  NOT NULL CHECK (failures > 0),
    last_failure_ms     BIGINT  NOT NULL,
    held_until_ms       BIGINT  NOT NULL DEFAULT 0
);

CREATE INDEX login_failures_last ON login_failures (last_failure_ms);
