-- A passage's time as the barrier said it, beside the time taken (crate::clock): a retry is the
-- same plate, barrier and time said; the difference is the barrier's clock offset.
ALTER TABLE visits ADD COLUMN entry_said_ms BIGINT, ADD COLUMN exit_said_ms BIGINT;
UPDATE visits SET entry_said_ms = entered_at_ms, exit_said_ms = left_at_ms;
ALTER TABLE visits ALTER COLUMN entry_said_ms SET NOT NULL,
    ADD CONSTRAINT visits_exit_said CHECK ((left_at_ms IS NULL) = (exit_said_ms IS NULL));

-- No two stays of one plate overlap, whichever code path writes them: a stay holds its plate
-- from its entrance to its exit, both included (an open stay: onwards). An existing overlap
-- (written before this rule) stops the migration; such stays must be corrected by hand.
CREATE EXTENSION IF NOT EXISTS btree_gist;
ALTER TABLE visits ADD CONSTRAINT visits_no_overlap
    EXCLUDE USING gist (plate WITH =, int8range(entered_at_ms, left_at_ms, '[]') WITH &&);

-- The last clock offset a barrier's passages showed (crate::clock), written when it changes.
ALTER TABLE barriers ADD COLUMN clock_offset_ms BIGINT, ADD COLUMN clock_seen_at_ms BIGINT;
