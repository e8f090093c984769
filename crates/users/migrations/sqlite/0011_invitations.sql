-- PARKY coins for inviting a friend and for a customer's anniversary. Keep in step with
-- ../postgres/0011_invitations.sql (SQLite cannot add NOT NULL without a default: the service
-- always writes registered_on).
ALTER TABLE users ADD COLUMN invitation_code TEXT;
ALTER TABLE users ADD COLUMN invited_by INTEGER REFERENCES users (id) ON DELETE SET NULL;
ALTER TABLE users ADD COLUMN registered_on TEXT;
UPDATE users SET registered_on = date('now');
UPDATE users SET invitation_code = upper(hex(randomblob(5))) WHERE role = 'CUSTOMER';
CREATE UNIQUE INDEX users_invitation_code_key ON users (invitation_code);
