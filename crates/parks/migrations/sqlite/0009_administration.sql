-- Running one's own parks (issue 61). Keep in step with ../postgres/0009_administration.sql.
ALTER TABLE parks ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE parks ADD COLUMN address TEXT NOT NULL DEFAULT '';
ALTER TABLE parks ADD COLUMN opening_hours TEXT;
ALTER TABLE parks ADD COLUMN entrances_open INTEGER NOT NULL DEFAULT 1 CHECK (entrances_open IN (0, 1));
UPDATE parks SET name = 'Park ' || park_number;

ALTER TABLE barriers ADD COLUMN key_hash TEXT;
ALTER TABLE displays ADD COLUMN key_hash TEXT;

CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY,
    at_ms INTEGER NOT NULL,
    actor_id INTEGER NOT NULL,
    action TEXT NOT NULL,
    subject TEXT NOT NULL,
    before_doc TEXT,
    after_doc TEXT
);
CREATE INDEX audit_log_by_subject ON audit_log (subject, id);
