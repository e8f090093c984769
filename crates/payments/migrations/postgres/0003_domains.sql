-- The columns' value rules as domains instead of CHECK constraints on each table, as the parks
-- service's 0005_domains.sql does and for the same reason: PostgreSQL parses and plans every
-- CHECK constraint of a table again in each statement that writes it (an invoice paid for four
-- per visit), while a domain's rule stays compiled and is checked only for assigned columns.
-- The rule across columns stays a table constraint (`invoices_left_after_entry`). SQLite keeps
-- the same rules as CHECK constraints (../sqlite/0001_payments.sql).
CREATE DOMAIN positive AS BIGINT CHECK (VALUE > 0);
CREATE DOMAIN non_negative AS BIGINT CHECK (VALUE >= 0);
CREATE DOMAIN vehicle_type AS TEXT CHECK (VALUE IN ('AUTOMOBILE', 'MOTORCYCLE'));
CREATE DOMAIN invoice_status AS TEXT CHECK (VALUE IN ('AWAITING_COINS', 'ISSUED'));
CREATE DOMAIN invoice_row_kind AS TEXT CHECK (VALUE IN ('BLOCK', 'OVERNIGHT', 'DAILY_MAXIMUM', 'MINIMUM'));

ALTER TABLE price_tables
    DROP CONSTRAINT price_tables_version_check,
    ALTER COLUMN version TYPE positive;

ALTER TABLE vehicles
    DROP CONSTRAINT vehicles_vehicle_type_check,
    ALTER COLUMN vehicle_type TYPE vehicle_type;

ALTER TABLE open_visits
    DROP CONSTRAINT open_visits_vehicle_type_check,
    ALTER COLUMN vehicle_type TYPE vehicle_type;

ALTER TABLE invoices
    DROP CONSTRAINT invoices_vehicle_type_check,
    DROP CONSTRAINT invoices_coins_check,
    DROP CONSTRAINT invoices_status_check,
    ALTER COLUMN vehicle_type TYPE vehicle_type,
    ALTER COLUMN coins TYPE non_negative,
    ALTER COLUMN status TYPE invoice_status;

ALTER TABLE invoice_rows
    DROP CONSTRAINT invoice_rows_kind_check,
    ALTER COLUMN kind TYPE invoice_row_kind;
