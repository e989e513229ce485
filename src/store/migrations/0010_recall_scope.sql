-- Recall that scales: the full-text index gains a `scope` column holding
-- one token per (org, project), so a search reads only its project's
-- matches, newest first, and stops after a bounded number of them (see
-- `observations.rs`). The index reads its columns through a view, so
-- `rebuild` and the auxiliary functions see exactly what was indexed.
DROP TRIGGER observations_ai;
DROP TRIGGER observations_ad;
DROP TRIGGER observations_au;
DROP TABLE observations_fts;

CREATE VIEW observations_fts_source AS
    SELECT seq, content, coalesce(type, '') AS type,
           'p' || lower(hex(org_id)) || 'x' || lower(hex(project_id)) || 'q' AS scope
    FROM observations;

CREATE VIRTUAL TABLE observations_fts USING fts5(
    content, type, scope,
    content = 'observations_fts_source', content_rowid = 'seq',
    tokenize = 'porter unicode61'
);
INSERT INTO observations_fts(observations_fts) VALUES ('rebuild');

CREATE TRIGGER observations_ai AFTER INSERT ON observations BEGIN
    INSERT INTO observations_fts(rowid, content, type, scope)
        VALUES (new.seq, new.content, coalesce(new.type, ''),
                'p' || lower(hex(new.org_id)) || 'x' || lower(hex(new.project_id)) || 'q');
END;
CREATE TRIGGER observations_ad AFTER DELETE ON observations BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, content, type, scope)
        VALUES ('delete', old.seq, old.content, coalesce(old.type, ''),
                'p' || lower(hex(old.org_id)) || 'x' || lower(hex(old.project_id)) || 'q');
END;
CREATE TRIGGER observations_au AFTER UPDATE OF content, type, org_id, project_id ON observations BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, content, type, scope)
        VALUES ('delete', old.seq, old.content, coalesce(old.type, ''),
                'p' || lower(hex(old.org_id)) || 'x' || lower(hex(old.project_id)) || 'q');
    INSERT INTO observations_fts(rowid, content, type, scope)
        VALUES (new.seq, new.content, coalesce(new.type, ''),
                'p' || lower(hex(new.org_id)) || 'x' || lower(hex(new.project_id)) || 'q');
END;
