-- The parks service's tables (SQLite). Keep in step with ../postgres/0001_parks.sql: the same
-- tables, columns, constraints and names. Instants are epoch milliseconds (UTC); money is exact
-- decimal text; enumerations are their API names, checked.

CREATE TABLE parks (
    id INTEGER PRIMARY KEY,
    park_number INTEGER NOT NULL UNIQUE CHECK (park_number > 0),
    max_occupancy INTEGER NOT NULL CHECK (max_occupancy >= 0),
    occupied INTEGER NOT NULL DEFAULT 0,
    latitude REAL NOT NULL CHECK (latitude BETWEEN -90 AND 90),
    longitude REAL NOT NULL CHECK (longitude BETWEEN -180 AND 180),
    time_zone TEXT NOT NULL,
    parkies_per_hour INTEGER NOT NULL CHECK (parkies_per_hour >= 0),
    parkies_per_minute INTEGER NOT NULL CHECK (parkies_per_minute >= 0),
    overnight_fee INTEGER NOT NULL CHECK (overnight_fee >= 0),
    overnight_enabled INTEGER NOT NULL CHECK (overnight_enabled IN (0, 1)),
    CONSTRAINT parks_not_overfilled CHECK (occupied >= 0 AND occupied <= max_occupancy)
);

CREATE TABLE spots (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    park_id INTEGER NOT NULL REFERENCES parks (id),
    spot_number TEXT NOT NULL,
    spot_type TEXT NOT NULL CHECK (spot_type IN ('FUEL', 'GPL', 'ELECTRIC', 'PLUG_IN_HYBRID')),
    spot_vehicle_type TEXT NOT NULL CHECK (spot_vehicle_type IN ('AUTOMOBILE', 'MOTORCYCLE')),
    floor_level TEXT NOT NULL,
    occupied INTEGER NOT NULL CHECK (occupied IN (0, 1)),
    operational INTEGER NOT NULL CHECK (operational IN (0, 1)),
    UNIQUE (park_id, spot_number)
);
CREATE INDEX spots_free ON spots (park_id, spot_vehicle_type, spot_type, occupied, operational);

CREATE TABLE spot_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    spot_id INTEGER NOT NULL REFERENCES spots (id),
    operational INTEGER NOT NULL CHECK (operational IN (0, 1)),
    changed_by TEXT NOT NULL,
    manager_id INTEGER NOT NULL,
    changed_at_ms INTEGER NOT NULL,
    message TEXT NOT NULL
);

CREATE TABLE barriers (
    id INTEGER PRIMARY KEY,
    park_id INTEGER NOT NULL REFERENCES parks (id),
    barrier_number TEXT NOT NULL,
    direction TEXT NOT NULL CHECK (direction IN ('ENTRANCE', 'EXIT')),
    state TEXT NOT NULL CHECK (state IN ('ACTIVE', 'DISABLED')),
    UNIQUE (park_id, barrier_number)
);

CREATE TABLE displays (
    id INTEGER PRIMARY KEY,
    park_id INTEGER NOT NULL REFERENCES parks (id),
    display_number TEXT NOT NULL,
    barrier_id INTEGER NOT NULL REFERENCES barriers (id),
    state TEXT NOT NULL CHECK (state IN ('ACTIVE', 'DISABLED')),
    message TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (park_id, display_number)
);

CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    nif INTEGER NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ENABLED', 'DISABLED', 'BLOCKED')),
    use_parky_coins INTEGER NOT NULL DEFAULT 0 CHECK (use_parky_coins IN (0, 1))
);

CREATE TABLE vehicles (
    plate TEXT PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    vehicle_type TEXT NOT NULL CHECK (vehicle_type IN ('AUTOMOBILE', 'MOTORCYCLE')),
    energy_source TEXT NOT NULL CHECK (energy_source IN ('FUEL', 'GPL', 'ELECTRIC', 'PLUG_IN_HYBRID'))
);

CREATE TABLE visits (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    park_id INTEGER NOT NULL REFERENCES parks (id),
    spot_id INTEGER NOT NULL REFERENCES spots (id),
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    plate TEXT NOT NULL,
    vehicle_type TEXT NOT NULL CHECK (vehicle_type IN ('AUTOMOBILE', 'MOTORCYCLE')),
    energy_source TEXT NOT NULL CHECK (energy_source IN ('FUEL', 'GPL', 'ELECTRIC', 'PLUG_IN_HYBRID')),
    entry_barrier_id INTEGER NOT NULL REFERENCES barriers (id),
    entered_at_ms INTEGER NOT NULL,
    exit_barrier_id INTEGER REFERENCES barriers (id),
    left_at_ms INTEGER,
    use_coins INTEGER NOT NULL DEFAULT 0 CHECK (use_coins IN (0, 1)),
    invoice_id INTEGER,
    price TEXT,
    discount TEXT,
    CONSTRAINT visits_exit_after_entry CHECK (left_at_ms IS NULL OR left_at_ms >= entered_at_ms)
);
CREATE UNIQUE INDEX visits_one_open_per_plate ON visits (plate) WHERE left_at_ms IS NULL;
CREATE UNIQUE INDEX visits_one_open_per_spot ON visits (spot_id) WHERE left_at_ms IS NULL;
CREATE INDEX visits_by_customer ON visits (customer_id, id);

CREATE TABLE price_tables (
    park_id INTEGER NOT NULL REFERENCES parks (id),
    version INTEGER NOT NULL CHECK (version > 0),
    valid_from_ms INTEGER NOT NULL,
    document TEXT NOT NULL,
    changed_by INTEGER,
    PRIMARY KEY (park_id, version)
);

CREATE TABLE park_reports (
    park_id INTEGER NOT NULL REFERENCES parks (id),
    day TEXT NOT NULL,
    total_vehicles INTEGER NOT NULL DEFAULT 0,
    cars INTEGER NOT NULL DEFAULT 0,
    motorcycles INTEGER NOT NULL DEFAULT 0,
    fuel INTEGER NOT NULL DEFAULT 0,
    gpl INTEGER NOT NULL DEFAULT 0,
    electric INTEGER NOT NULL DEFAULT 0,
    plug_in_hybrid INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (park_id, day)
);

CREATE TABLE park_time_reports (
    park_id INTEGER NOT NULL REFERENCES parks (id),
    day TEXT NOT NULL,
    customer_id INTEGER NOT NULL,
    minutes INTEGER NOT NULL CHECK (minutes >= 0),
    PRIMARY KEY (park_id, day, customer_id)
);
