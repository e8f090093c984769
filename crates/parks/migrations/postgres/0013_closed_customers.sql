-- Customers who closed their account (crate::store::closure): when the closure was read, and
-- when the last of their personal data here was erased (their stays' plates, their vehicles,
-- their name and tax number). Between the two, a car of theirs is inside or left within the
-- grace its exit's retries need; the index finds those customers for the erasure round.
ALTER TABLE customers ADD COLUMN closed_at_ms BIGINT, ADD COLUMN erased_at_ms BIGINT;
CREATE INDEX customers_being_erased ON customers (id)
    WHERE closed_at_ms IS NOT NULL AND erased_at_ms IS NULL;
