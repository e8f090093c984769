-- Coins spent on invoices, once per invoice (PostgreSQL; the SQLite migration of the same number
-- matches), and a snapshot of every existing user as `customer.registered`, so services that
-- start consuming this outbox learn the users registered before it existed.

CREATE TABLE coin_debits (
    invoice_id      BIGINT  PRIMARY KEY,
    user_id         BIGINT  NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    coins           BIGINT  NOT NULL CHECK (coins >= 0),
    created_at_us   BIGINT  NOT NULL
);

INSERT INTO outbox (aggregate_type, aggregate_id, event_type, version, payload, created_at)
SELECT 'customer', u.id::text, 'customer.registered', 1,
       json_build_object(
           'userId', u.id, 'firstName', u.first_name, 'lastName', u.last_name, 'email', u.email,
           'nif', u.nif, 'role', u.role, 'userStatus', u.status, 'paymentMethod', u.payment_method,
           'vehicles', COALESCE((
               SELECT json_agg(json_build_object(
                   'licensePlateNumber', v.plate, 'vehicleType', v.vehicle_type,
                   'vehicleEnergySource', v.energy_source) ORDER BY v.added_seq)
               FROM vehicles v WHERE v.user_id = u.id), '[]'::json))::text,
       to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
FROM users u ORDER BY u.id;
