-- Version 15 is SQLite's deferred full-text indexing of observations
-- (`../0015_text_index_waits.sql`): a durable SQLite commit no longer
-- writes a new FTS5 segment. PostgreSQL keeps its term index in the
-- observation's own statement (its commit writes its own WAL record, not
-- the index's pages), so this version changes nothing here; it keeps both
-- backends' versions one list.
SELECT 1;
