-- An invoice row may stand for several blocks of one length and price one after another (the
-- repeats of a period's last block, one row per stretch of the period within a day), so that an
-- invoice grows with the days parked, not with its 15-minute blocks. `price` is the row's amount,
-- `blocks` times the price of one; rows written before this migration are one block each.
ALTER TABLE invoice_rows ADD COLUMN blocks BIGINT NOT NULL DEFAULT 1 CHECK (blocks >= 1);
