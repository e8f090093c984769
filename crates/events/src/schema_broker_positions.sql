-- Domain events (pms-events), second step, the same on both backends: a broker consumer's hint
-- of where to resume in the NATS stream (pms_events::position), the stream sequence of a
-- message at or before the consumer's position. Written after commits; NULL reads the stream
-- from its start.
ALTER TABLE event_positions ADD COLUMN broker_seq BIGINT;
