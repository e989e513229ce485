-- Version 10 changes SQLite's full-text index only (a per-project scope
-- column). PostgreSQL's search already filters on (org_id, project_id) and
-- reads a term's newest matches through the existing indexes.
SELECT 1;
