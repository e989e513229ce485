-- Version 13 adds PostgreSQL's per-term recall index only (see
-- `postgres/0013_recall_terms.sql`); SQLite's FTS5 index already reads a
-- term's newest matches in a project in order (version 10).
SELECT 1;
