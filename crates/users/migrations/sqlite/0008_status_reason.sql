-- Why an account's status is what it is (a blocked customer is told why), who set it and when.
ALTER TABLE users ADD COLUMN status_reason TEXT
    CHECK (status_reason IS NULL OR length(status_reason) BETWEEN 1 AND 500);
ALTER TABLE users ADD COLUMN status_changed_by BIGINT;
ALTER TABLE users ADD COLUMN status_changed_at_us BIGINT;
