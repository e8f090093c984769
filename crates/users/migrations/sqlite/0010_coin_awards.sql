-- PARKY coins awarded to a wallet by what happened elsewhere (crate::store::coins): one row per
-- award, keyed by what earned it (`visit:<id>`), so an award is credited once however often the
-- event that carries it is delivered or replayed.
CREATE TABLE coin_awards (
    award_key       TEXT    PRIMARY KEY,
    user_id         INTEGER  NOT NULL,
    coins           INTEGER  NOT NULL CHECK (coins > 0),
    awarded_at_us   INTEGER  NOT NULL
);
