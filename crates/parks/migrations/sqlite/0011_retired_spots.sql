-- A spot retired by its park manager (crate::store::admin): kept for the visits that name it,
-- out of service, out of the park's capacity and spot list, its number not given again.
ALTER TABLE spots ADD COLUMN retired_at_ms INTEGER;
