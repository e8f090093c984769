-- The same indexes as ../postgres/0004_hot_updates.sql (there: so that a spot's rewrite at
-- every entrance and exit touches no index). SQLite has no fillfactor.
DROP INDEX spots_free;
CREATE INDEX spots_by_kind ON spots (park_id, spot_vehicle_type, spot_type);
CREATE INDEX displays_by_barrier ON displays (barrier_id);
