-- Domain events (pms-events), third step, the same on both backends: keeping the outbox bounded
-- (pms_events::retention). Each reader of this outbox (a consumer reading it in place, the relay
-- to the broker) notes how far it no longer needs it; the pruner deletes the passing events that
-- every reader has passed and that are older than the retention window, and notes how far it got.
CREATE TABLE outbox_readers (
    reader TEXT PRIMARY KEY,
    through BIGINT NOT NULL CHECK (through >= 0),
    updated_at TEXT NOT NULL
);

CREATE TABLE outbox_pruned (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    through BIGINT NOT NULL CHECK (through >= 0),
    pruned_at TEXT NOT NULL
);
