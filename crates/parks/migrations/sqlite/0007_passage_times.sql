-- A passage's time as the barrier said it, beside the time taken (crate::clock): a retry is the
-- same plate, barrier and time said; the difference is the barrier's clock offset.
ALTER TABLE visits ADD COLUMN entry_said_ms INTEGER;
ALTER TABLE visits ADD COLUMN exit_said_ms INTEGER;
UPDATE visits SET entry_said_ms = entered_at_ms, exit_said_ms = left_at_ms;

-- No two stays of one plate overlap, whichever code path writes them: a stay holds its plate
-- from its entrance to its exit, both included (an open stay: onwards). SQLite has no exclusion
-- constraint; these triggers are it (PostgreSQL: a constraint trigger), and they also keep the
-- time said present as PostgreSQL's NOT NULL and CHECK do. Both look the plate's stays up by
-- the index below: the open one, and those that end at or after the new one's entrance.
CREATE INDEX visits_by_plate ON visits (plate, left_at_ms);
CREATE TRIGGER visits_no_overlap_insert BEFORE INSERT ON visits
WHEN NEW.entry_said_ms IS NULL
  OR (NEW.left_at_ms IS NULL) <> (NEW.exit_said_ms IS NULL)
  OR EXISTS (SELECT 1 FROM visits o WHERE o.plate = NEW.plate AND o.left_at_ms IS NULL
       AND (NEW.left_at_ms IS NULL OR o.entered_at_ms <= NEW.left_at_ms))
  OR EXISTS (SELECT 1 FROM visits o WHERE o.plate = NEW.plate AND o.left_at_ms >= NEW.entered_at_ms
       AND (NEW.left_at_ms IS NULL OR o.entered_at_ms <= NEW.left_at_ms))
BEGIN
  SELECT RAISE(ABORT, 'visits_no_overlap: a stay of this plate overlaps another, or its time said is missing');
END;
-- A stay only shortened (an exit closing it) is not checked against the others again: it cannot
-- make an overlap.
CREATE TRIGGER visits_no_overlap_update BEFORE UPDATE OF plate, entered_at_ms, left_at_ms, entry_said_ms, exit_said_ms ON visits
WHEN NEW.entry_said_ms IS NULL
  OR (NEW.left_at_ms IS NULL) <> (NEW.exit_said_ms IS NULL)
  OR (NOT (NEW.plate = OLD.plate AND NEW.entered_at_ms >= OLD.entered_at_ms
           AND (OLD.left_at_ms IS NULL OR NEW.left_at_ms <= OLD.left_at_ms))
      AND (EXISTS (SELECT 1 FROM visits o WHERE o.plate = NEW.plate AND o.left_at_ms IS NULL AND o.id <> NEW.id
                   AND (NEW.left_at_ms IS NULL OR o.entered_at_ms <= NEW.left_at_ms))
        OR EXISTS (SELECT 1 FROM visits o WHERE o.plate = NEW.plate AND o.left_at_ms >= NEW.entered_at_ms AND o.id <> NEW.id
                   AND (NEW.left_at_ms IS NULL OR o.entered_at_ms <= NEW.left_at_ms))))
BEGIN
  SELECT RAISE(ABORT, 'visits_no_overlap: a stay of this plate overlaps another, or its time said is missing');
END;

-- The last clock offset a barrier's passages showed (crate::clock), written when it changes.
ALTER TABLE barriers ADD COLUMN clock_offset_ms INTEGER;
ALTER TABLE barriers ADD COLUMN clock_seen_at_ms INTEGER;
