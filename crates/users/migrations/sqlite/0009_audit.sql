-- The audit trail (pms_service::audit, its schema_audit.sql): customers blocked and enabled,
-- coins granted and deducted, each with who, when and the account before and after.
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
