-- PARKY coins awarded to a wallet by what happened elsewhere (crate::store::coins): one row per
-- award, keyed by what earned it (`visit:<id>`), so an award is credited once however often the
-- event that carries it is delivered or replayed.
CREATE TABLE coin_awards (
    award_key       TEXT    PRIMARY KEY,
    user_id         BIGINT  NOT NULL,
    coins           BIGINT  NOT NULL CHECK (coins > 0),
    awarded_at_us   BIGINT  NOT NULL
);
