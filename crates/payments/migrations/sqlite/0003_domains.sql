-- Nothing to do: ../postgres/0003_domains.sql moves PostgreSQL's per-column CHECK constraints to
-- domains (there they are parsed again in every statement that writes the table); SQLite keeps
-- the same rules as the CHECK constraints of 0001_payments.sql.
SELECT 1;
