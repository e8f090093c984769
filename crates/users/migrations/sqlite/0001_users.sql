-- Users, their vehicles and their PARKY wallet events (SQLite). The PostgreSQL migration of the
-- same number defines the same tables, columns, constraints and names.

CREATE TABLE users (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    first_name      TEXT    NOT NULL CHECK (length(first_name) BETWEEN 1 AND 100),
    last_name       TEXT    NOT NULL CHECK (length(last_name) BETWEEN 1 AND 100),
    email           TEXT    NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    nif             INTEGER NOT NULL CHECK (nif > 100000000 AND nif < 999999999),
    password_hash   TEXT    NOT NULL,
    role            TEXT    NOT NULL CHECK (role IN ('SUPERVISOR', 'CUSTOMER', 'CUSTOMER_MANAGER', 'PARK_MANAGER')),
    payment_method  TEXT    NOT NULL CHECK (payment_method IN ('CREDIT', 'DEBIT', 'PAYPAL', 'NOT_DEFINED')),
    status          TEXT    NOT NULL CHECK (status IN ('ENABLED', 'DISABLED', 'BLOCKED')),
    parkies         INTEGER NOT NULL DEFAULT 0 CHECK (parkies >= 0),
    vehicle_count   INTEGER NOT NULL DEFAULT 0 CHECK (vehicle_count BETWEEN 0 AND 3),
    CONSTRAINT users_nif_key UNIQUE (nif)
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

CREATE TABLE vehicles (
    plate           TEXT    NOT NULL,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    vehicle_type    TEXT    NOT NULL CHECK (vehicle_type IN ('AUTOMOBILE', 'MOTORCYCLE')),
    energy_source   TEXT    NOT NULL CHECK (energy_source IN ('FUEL', 'GPL', 'ELECTRIC', 'PLUG_IN_HYBRID')),
    added_seq       INTEGER NOT NULL,
    CONSTRAINT vehicles_plate_key PRIMARY KEY (plate)
);
CREATE INDEX vehicles_user_idx ON vehicles (user_id, added_seq);

CREATE TABLE parky_events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    amount          INTEGER NOT NULL CHECK (amount <> 0),
    reason          TEXT    NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    manager_id      INTEGER REFERENCES users (id) ON DELETE SET NULL,
    created_at_us   INTEGER NOT NULL
);
CREATE INDEX parky_events_user_idx ON parky_events (user_id, id);
