-- The payments service's tables (SQLite). Keep in step with ../postgres/0001_payments.sql.
-- Instants are epoch milliseconds (UTC); money is exact decimal text.

CREATE TABLE price_tables (
    park_id INTEGER NOT NULL,
    version INTEGER NOT NULL CHECK (version > 0),
    park_number INTEGER NOT NULL,
    valid_from_ms INTEGER NOT NULL,
    time_zone TEXT NOT NULL,
    document TEXT NOT NULL,
    PRIMARY KEY (park_id, version)
);

CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    nif INTEGER NOT NULL,
    name TEXT NOT NULL
);
CREATE INDEX customers_by_nif ON customers (nif);

CREATE TABLE vehicles (
    plate TEXT PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    vehicle_type TEXT NOT NULL CHECK (vehicle_type IN ('AUTOMOBILE', 'MOTORCYCLE'))
);

CREATE TABLE open_visits (
    visit_id INTEGER PRIMARY KEY,
    park_id INTEGER NOT NULL,
    customer_id INTEGER NOT NULL,
    plate TEXT NOT NULL,
    vehicle_type TEXT NOT NULL CHECK (vehicle_type IN ('AUTOMOBILE', 'MOTORCYCLE')),
    entered_at_ms INTEGER NOT NULL
);
CREATE INDEX open_visits_by_plate ON open_visits (plate);

CREATE TABLE invoices (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    visit_id INTEGER NOT NULL UNIQUE,
    customer_id INTEGER NOT NULL,
    nif INTEGER NOT NULL,
    park_id INTEGER NOT NULL,
    plate TEXT NOT NULL,
    vehicle_type TEXT NOT NULL CHECK (vehicle_type IN ('AUTOMOBILE', 'MOTORCYCLE')),
    entered_at_ms INTEGER NOT NULL,
    left_at_ms INTEGER NOT NULL,
    time_zone TEXT NOT NULL,
    price_table_version INTEGER NOT NULL,
    total TEXT NOT NULL,
    discount TEXT NOT NULL,
    coins INTEGER NOT NULL DEFAULT 0 CHECK (coins >= 0),
    status TEXT NOT NULL CHECK (status IN ('AWAITING_COINS', 'ISSUED')),
    created_at_ms INTEGER NOT NULL,
    issued_at_ms INTEGER,
    CONSTRAINT invoices_left_after_entry CHECK (left_at_ms >= entered_at_ms)
);
CREATE INDEX invoices_by_nif ON invoices (nif, id);
CREATE INDEX invoices_by_customer ON invoices (customer_id, id);

CREATE TABLE invoice_rows (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    invoice_id INTEGER NOT NULL REFERENCES invoices (id),
    kind TEXT NOT NULL CHECK (kind IN ('BLOCK', 'OVERNIGHT', 'DAILY_MAXIMUM', 'MINIMUM')),
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    price TEXT NOT NULL
);
CREATE INDEX invoice_rows_by_invoice ON invoice_rows (invoice_id, id);
