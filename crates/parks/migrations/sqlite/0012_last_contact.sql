-- When each device last proved itself with its key (crate::store::devices::Contacts): written
-- every few seconds from what the service saw, never moved back.
ALTER TABLE barriers ADD COLUMN last_contact_ms INTEGER;
ALTER TABLE displays ADD COLUMN last_contact_ms INTEGER;
