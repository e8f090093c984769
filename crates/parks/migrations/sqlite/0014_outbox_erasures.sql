-- Domain events (pms-events), fourth step, the same on both backends: erasing a person's data
-- from events already written (pms_events::erasure). Each row asks that the events about one
-- thing be rewritten with the fields given (a JSON object) once every reader of this outbox has
-- them; the retention round does so, and forgets the row once none is still on its way.
CREATE TABLE outbox_erasures (
    aggregate_type TEXT NOT NULL,
    aggregate_id TEXT NOT NULL,
    fields TEXT NOT NULL,
    asked_at TEXT NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
