-- Coins spent on invoices, once per invoice (SQLite; the PostgreSQL migration of the same number
-- matches), and a snapshot of every existing user as `customer.registered`, so services that
-- start consuming this outbox learn the users registered before it existed.

CREATE TABLE coin_debits (
    invoice_id      INTEGER PRIMARY KEY,
    user_id         INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    coins           INTEGER NOT NULL CHECK (coins >= 0),
    created_at_us   INTEGER NOT NULL
);

INSERT INTO outbox (aggregate_type, aggregate_id, event_type, version, payload, created_at)
SELECT 'customer', CAST(u.id AS TEXT), 'customer.registered', 1,
       json_object(
           'userId', u.id, 'firstName', u.first_name, 'lastName', u.last_name, 'email', u.email,
           'nif', u.nif, 'role', u.role, 'userStatus', u.status, 'paymentMethod', u.payment_method,
           'vehicles', json(COALESCE((
               SELECT json_group_array(json_object(
                   'licensePlateNumber', v.plate, 'vehicleType', v.vehicle_type,
                   'vehicleEnergySource', v.energy_source))
               FROM (SELECT * FROM vehicles WHERE user_id = u.id ORDER BY added_seq) v), '[]'))),
       strftime('%Y-%m-%dT%H:%M:%SZ', 'now')
FROM users u ORDER BY u.id;
