-- A table for the test of replicas migrating at once.
CREATE TABLE replicas (id BIGINT PRIMARY KEY);
