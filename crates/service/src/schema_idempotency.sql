-- Idempotency keys (pms_service::idempotency), the same on both backends: each caller's keys of
-- the last day, the request's fingerprint, and the answer it got (written in the transaction
-- that did the work, so a committed key always has one). Times are ms since the Unix epoch.
CREATE TABLE idempotency_keys (
    caller_id BIGINT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status BIGINT,
    body TEXT,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (caller_id, key)
);
