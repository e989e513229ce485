-- Version 14 is SQLite's `decisions_recent` table and the `decisions` view
-- over it and the indexed table (`../0014_trail_recent.sql`): a durable
-- SQLite commit then writes a page of the recent table instead of a leaf of
-- each of the trail's indexes. PostgreSQL keeps its one `decisions` table
-- (a commit there writes its own WAL record, not the indexes' pages), so
-- this version changes nothing here; it keeps both backends' versions one
-- list.
SELECT 1;
