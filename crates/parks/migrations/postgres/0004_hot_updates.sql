-- Rows that every entrance and exit rewrites (a spot, its park, the barrier's displays) are
-- rewritten in place: no index names a column those writes change, and their pages keep room
-- for the new version (fillfactor). PostgreSQL then makes each write a heap-only (HOT) update
-- and prunes old versions within the page, instead of adding index entries for every version,
-- which bloated the spot search's index by thousands of dead entries a minute under load.
DROP INDEX spots_free;
CREATE INDEX spots_by_kind ON spots (park_id, spot_vehicle_type, spot_type);
CREATE INDEX displays_by_barrier ON displays (barrier_id);
ALTER TABLE spots SET (fillfactor = 50);
ALTER TABLE parks SET (fillfactor = 50);
ALTER TABLE displays SET (fillfactor = 50);
