-- PARKY coins for inviting a friend and for a customer's anniversary (crate::store::awards).
-- Each customer has an invitation code to give; a customer who registered with one names who
-- invited them. Accounts registered before this migration count from its day for anniversaries.
ALTER TABLE users ADD COLUMN invitation_code TEXT,
    ADD COLUMN invited_by BIGINT REFERENCES users (id) ON DELETE SET NULL,
    ADD COLUMN registered_on TEXT;
UPDATE users SET registered_on = CAST(CURRENT_DATE AS TEXT);
UPDATE users SET invitation_code = upper(substr(md5(random()::text || id::text), 1, 10))
    WHERE role = 'CUSTOMER';
ALTER TABLE users ALTER COLUMN registered_on SET NOT NULL;
CREATE UNIQUE INDEX users_invitation_code_key ON users (invitation_code);
