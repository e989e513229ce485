-- A new observation waits for its full-text index (SQLite): the insert
-- trigger is gone, so a durable commit writes the observation's row and
-- B-tree leaves but not the four or five pages of a new FTS5 segment. The
-- writer indexes every waiting observation right after the batch that
-- stored it, in a transaction of its own that needs no sync (the rows are
-- durable already; a crash leaves them waiting, and opening the store
-- indexes them), and a recall first waits for the observations committed
-- before it (`src/store/README.md`, "Observations wait for the text
-- index"). `observations_fts_upto` holds the newest seq indexed: rows
-- after it are not in the index, so deleting or updating one must not
-- touch the index (an FTS5 'delete' of a row it never held corrupts it).
-- A new row's seq is one past the largest left (no AUTOINCREMENT), so
-- deleting the newest indexed rows lowers the mark to the largest seq
-- left: a seq handed out again is then after the mark, never taken for
-- indexed.
-- PostgreSQL keeps indexing in the observation's own statement.
DROP TRIGGER observations_ai;
DROP TRIGGER observations_ad;
DROP TRIGGER observations_au;

CREATE TABLE observations_fts_upto (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);
INSERT INTO observations_fts_upto (id, seq)
    VALUES (1, (SELECT coalesce(max(seq), 0) FROM observations));

CREATE TRIGGER observations_ad AFTER DELETE ON observations
WHEN old.seq <= (SELECT seq FROM observations_fts_upto WHERE id = 1)
BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, content, type, scope)
        VALUES ('delete', old.seq, old.content, coalesce(old.type, ''),
                'p' || lower(hex(old.org_id)) || 'x' || lower(hex(old.project_id)) || 'q');
    UPDATE observations_fts_upto SET seq = (SELECT coalesce(max(seq), 0) FROM observations)
    WHERE id = 1 AND seq > (SELECT coalesce(max(seq), 0) FROM observations);
END;
CREATE TRIGGER observations_au AFTER UPDATE OF content, type, org_id, project_id ON observations
WHEN old.seq <= (SELECT seq FROM observations_fts_upto WHERE id = 1)
BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, content, type, scope)
        VALUES ('delete', old.seq, old.content, coalesce(old.type, ''),
                'p' || lower(hex(old.org_id)) || 'x' || lower(hex(old.project_id)) || 'q');
    INSERT INTO observations_fts(rowid, content, type, scope)
        VALUES (new.seq, new.content, coalesce(new.type, ''),
                'p' || lower(hex(new.org_id)) || 'x' || lower(hex(new.project_id)) || 'q');
END;
