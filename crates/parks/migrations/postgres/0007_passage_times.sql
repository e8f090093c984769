-- A passage's time as the barrier said it, beside the time taken (crate::clock): a retry is the
-- same plate, barrier and time said; the difference is the barrier's clock offset.
ALTER TABLE visits ADD COLUMN entry_said_ms BIGINT, ADD COLUMN exit_said_ms BIGINT;
UPDATE visits SET entry_said_ms = entered_at_ms, exit_said_ms = left_at_ms;
ALTER TABLE visits ALTER COLUMN entry_said_ms SET NOT NULL,
    ADD CONSTRAINT visits_exit_said CHECK ((left_at_ms IS NULL) = (exit_said_ms IS NULL));

-- No two stays of one plate overlap, whichever code path writes them: a stay holds its plate
-- from its entrance to its exit, both included (an open stay: onwards). A constraint trigger
-- checks each new or grown stay against the plate's others, found by the index below, under a
-- lock per plate (so two writes of one plate at once are checked one after the other), and
-- refuses an overlap as an exclusion constraint would (SQLSTATE 23P01, constraint
-- visits_no_overlap). Why not EXCLUDE USING gist (plate WITH =, int8range(...) WITH &&): its
-- index costs every entrance and exit a GiST insertion, measured at about a third of the
-- barriers' throughput (docs/benchmark-history.md, 2026-12-05); an exit only shortens its open
-- stay, which cannot make an overlap, so here it checks nothing. The plan inside is pinned to
-- the index: a plan cached while the table was small would scan it whole ever after.
CREATE INDEX visits_by_plate ON visits (plate, left_at_ms);

CREATE FUNCTION visits_no_overlap() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT SET enable_seqscan = off AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(TG_RELID::int, hashtext(NEW.plate));
    IF EXISTS (SELECT 1 FROM visits o WHERE o.plate = NEW.plate AND o.id <> NEW.id
               AND o.left_at_ms IS NULL
               AND (NEW.left_at_ms IS NULL OR o.entered_at_ms <= NEW.left_at_ms))
    OR EXISTS (SELECT 1 FROM visits o WHERE o.plate = NEW.plate AND o.id <> NEW.id
               AND o.left_at_ms >= NEW.entered_at_ms
               AND (NEW.left_at_ms IS NULL OR o.entered_at_ms <= NEW.left_at_ms)) THEN
        RAISE EXCEPTION 'visits_no_overlap: stay % of plate % overlaps another', NEW.id, NEW.plate
            USING ERRCODE = 'exclusion_violation', CONSTRAINT = 'visits_no_overlap',
                  TABLE = 'visits';
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER visits_no_overlap AFTER INSERT ON visits
    FOR EACH ROW EXECUTE FUNCTION visits_no_overlap();
-- A stay only shortened (an exit closing it) is not checked again.
CREATE CONSTRAINT TRIGGER visits_no_overlap_grown AFTER UPDATE ON visits
    FOR EACH ROW WHEN (NOT (NEW.plate = OLD.plate AND NEW.entered_at_ms >= OLD.entered_at_ms
        AND (OLD.left_at_ms IS NULL OR NEW.left_at_ms <= OLD.left_at_ms)))
    EXECUTE FUNCTION visits_no_overlap();

-- The last clock offset a barrier's passages showed (crate::clock), written when it changes.
ALTER TABLE barriers ADD COLUMN clock_offset_ms BIGINT, ADD COLUMN clock_seen_at_ms BIGINT;
