-- Accounts their customers closed (crate::store::closure). Closing deletes the user's row, and
-- with it their vehicles, wallet history and coin debits; this row is what is left: the id
-- (never given to anyone else), when, and the coins the wallet held then. No personal data.
CREATE TABLE closed_accounts (
    user_id         BIGINT  PRIMARY KEY,
    closed_at_us    BIGINT  NOT NULL,
    coins_forfeited BIGINT  NOT NULL CHECK (coins_forfeited >= 0)
);
