-- The columns' value rules as domains instead of CHECK constraints on each table: the same rules,
-- each vocabulary stated once. Why: PostgreSQL reads and plans every CHECK constraint of a table
-- again in each statement that writes a row of it (the constraint text is parsed per statement),
-- so a barrier's statement paid for all nine rules of its park and four of its spot. A domain's
-- rule is kept compiled by the server and checked only for the columns a statement assigns. The
-- rules across columns stay table constraints (`parks_not_overfilled`, `visits_exit_after_entry`).
-- SQLite keeps its per-column CHECK constraints (../sqlite/0001_parks.sql): the same rules.
CREATE DOMAIN flag AS BIGINT CHECK (VALUE IN (0, 1));
CREATE DOMAIN positive AS BIGINT CHECK (VALUE > 0);
CREATE DOMAIN non_negative AS BIGINT CHECK (VALUE >= 0);
CREATE DOMAIN latitude AS DOUBLE PRECISION CHECK (VALUE BETWEEN -90 AND 90);
CREATE DOMAIN longitude AS DOUBLE PRECISION CHECK (VALUE BETWEEN -180 AND 180);
CREATE DOMAIN vehicle_type AS TEXT CHECK (VALUE IN ('AUTOMOBILE', 'MOTORCYCLE'));
CREATE DOMAIN energy_source AS TEXT CHECK (VALUE IN ('FUEL', 'GPL', 'ELECTRIC', 'PLUG_IN_HYBRID'));
CREATE DOMAIN device_state AS TEXT CHECK (VALUE IN ('ACTIVE', 'DISABLED'));
CREATE DOMAIN direction AS TEXT CHECK (VALUE IN ('ENTRANCE', 'EXIT'));
CREATE DOMAIN customer_status AS TEXT CHECK (VALUE IN ('ENABLED', 'DISABLED', 'BLOCKED'));

ALTER TABLE parks
    DROP CONSTRAINT parks_park_number_check,
    DROP CONSTRAINT parks_max_occupancy_check,
    DROP CONSTRAINT parks_latitude_check,
    DROP CONSTRAINT parks_longitude_check,
    DROP CONSTRAINT parks_parkies_per_hour_check,
    DROP CONSTRAINT parks_parkies_per_minute_check,
    DROP CONSTRAINT parks_overnight_fee_check,
    DROP CONSTRAINT parks_overnight_enabled_check,
    ALTER COLUMN park_number TYPE positive,
    ALTER COLUMN max_occupancy TYPE non_negative,
    ALTER COLUMN latitude TYPE latitude,
    ALTER COLUMN longitude TYPE longitude,
    ALTER COLUMN parkies_per_hour TYPE non_negative,
    ALTER COLUMN parkies_per_minute TYPE non_negative,
    ALTER COLUMN overnight_fee TYPE non_negative,
    ALTER COLUMN overnight_enabled TYPE flag;

ALTER TABLE spots
    DROP CONSTRAINT spots_spot_type_check,
    DROP CONSTRAINT spots_spot_vehicle_type_check,
    DROP CONSTRAINT spots_occupied_check,
    DROP CONSTRAINT spots_operational_check,
    ALTER COLUMN spot_type TYPE energy_source,
    ALTER COLUMN spot_vehicle_type TYPE vehicle_type,
    ALTER COLUMN occupied TYPE flag,
    ALTER COLUMN operational TYPE flag;

ALTER TABLE spot_history
    DROP CONSTRAINT spot_history_operational_check,
    ALTER COLUMN operational TYPE flag;

ALTER TABLE barriers
    DROP CONSTRAINT barriers_direction_check,
    DROP CONSTRAINT barriers_state_check,
    ALTER COLUMN direction TYPE direction,
    ALTER COLUMN state TYPE device_state;

ALTER TABLE displays
    DROP CONSTRAINT displays_state_check,
    ALTER COLUMN state TYPE device_state;

ALTER TABLE customers
    DROP CONSTRAINT customers_status_check,
    DROP CONSTRAINT customers_use_parky_coins_check,
    ALTER COLUMN status TYPE customer_status,
    ALTER COLUMN use_parky_coins TYPE flag;

ALTER TABLE vehicles
    DROP CONSTRAINT vehicles_vehicle_type_check,
    DROP CONSTRAINT vehicles_energy_source_check,
    ALTER COLUMN vehicle_type TYPE vehicle_type,
    ALTER COLUMN energy_source TYPE energy_source;

ALTER TABLE visits
    DROP CONSTRAINT visits_vehicle_type_check,
    DROP CONSTRAINT visits_energy_source_check,
    DROP CONSTRAINT visits_use_coins_check,
    ALTER COLUMN vehicle_type TYPE vehicle_type,
    ALTER COLUMN energy_source TYPE energy_source,
    ALTER COLUMN use_coins TYPE flag;

ALTER TABLE price_tables
    DROP CONSTRAINT price_tables_version_check,
    ALTER COLUMN version TYPE positive;

ALTER TABLE park_time_reports
    DROP CONSTRAINT park_time_reports_minutes_check,
    ALTER COLUMN minutes TYPE non_negative;
