-- Change counters, kept in the rows that change anyway: a park's moves with every entrance,
-- exit, spot switched on or off and setting of the park; a display's with every message it is
-- given. A display's version is its own counter plus its park's, and the parks' version is the
-- sum of them all, so every replica of the service reads the same versions from the database
-- (the displays' long poll and the front office's live pages).
ALTER TABLE parks ADD COLUMN changes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE displays ADD COLUMN changes BIGINT NOT NULL DEFAULT 0;
