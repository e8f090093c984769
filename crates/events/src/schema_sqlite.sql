-- Domain events (pms-events). Keep in step with schema_postgres.sql.
CREATE TABLE outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    aggregate_type TEXT NOT NULL,
    aggregate_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version > 0),
    payload TEXT NOT NULL,
    created_at TEXT NOT NULL,
    published_at TEXT
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;

CREATE TABLE event_positions (
    consumer TEXT NOT NULL,
    source TEXT NOT NULL,
    position INTEGER NOT NULL CHECK (position >= 0),
    updated_at TEXT NOT NULL,
    PRIMARY KEY (consumer, source)
);

CREATE TABLE parked_events (
    consumer TEXT NOT NULL,
    source TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    version INTEGER NOT NULL,
    payload TEXT NOT NULL,
    reason TEXT NOT NULL,
    parked_at TEXT NOT NULL,
    PRIMARY KEY (consumer, source, event_id)
);
