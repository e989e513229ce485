-- The trail's newest records wait in a table without secondary indexes
-- (`decisions_recent`), so a durable commit writes a page or two of it
-- instead of a leaf of each of the trail's eleven B-trees; the writer
-- moves them into the indexed table (`decisions_indexed`) in batches, off
-- the answers' path (`src/store/README.md`, "The trail's recent records").
-- `decisions` is the view of both, so every reader sees every committed
-- record at once. Writes through the view: an insert lands in the recent
-- table, an update is refused, a delete (the archive's prune) removes the
-- record from whichever table holds it, refused for a record no anchor
-- covers, as before.
-- SQLite only: PostgreSQL keeps one table (its commit writes its own WAL).
DROP TRIGGER decisions_no_update;
DROP TRIGGER decisions_no_delete;
ALTER TABLE decisions RENAME TO decisions_indexed;
CREATE TRIGGER decisions_indexed_no_update BEFORE UPDATE ON decisions_indexed BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only');
END;
CREATE TRIGGER decisions_indexed_no_delete BEFORE DELETE ON decisions_indexed
WHEN old.seq > coalesce((SELECT max(seq) FROM decision_anchors), 0)
BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only: only records behind an anchor may be pruned');
END;
CREATE TABLE decisions_recent (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL,
    time          TEXT NOT NULL,
    org_id        TEXT,
    session_id    TEXT,
    principal     TEXT NOT NULL,
    action        TEXT NOT NULL,
    resource      TEXT NOT NULL,
    context       TEXT NOT NULL,
    entities_hash TEXT NOT NULL,
    policy_hash   TEXT NOT NULL,
    decision      TEXT NOT NULL,
    reasons       TEXT NOT NULL,
    errors        TEXT NOT NULL,
    outcome       TEXT NOT NULL,
    notes         TEXT NOT NULL,
    prev_hash     TEXT NOT NULL,
    hash          TEXT NOT NULL
);
CREATE TRIGGER decisions_recent_no_update BEFORE UPDATE ON decisions_recent BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only');
END;
-- No delete guard on the recent table itself: the writer empties it after
-- each move (`DELETE FROM decisions_recent`, which SQLite runs as one
-- truncation only on a table without delete triggers; a guard there made
-- the move row by row, 1.9 against 0.2 ms per 256 records). Deletes through
-- `decisions` keep the trail's guard (below), as do the indexed table's.
CREATE VIEW decisions AS
    SELECT seq, id, time, org_id, session_id, principal, action, resource, context,
           entities_hash, policy_hash, decision, reasons, errors, outcome, notes, prev_hash, hash
      FROM decisions_indexed
    UNION ALL
    SELECT seq, id, time, org_id, session_id, principal, action, resource, context,
           entities_hash, policy_hash, decision, reasons, errors, outcome, notes, prev_hash, hash
      FROM decisions_recent;
CREATE TRIGGER decisions_insert INSTEAD OF INSERT ON decisions BEGIN
    INSERT INTO decisions_recent (seq, id, time, org_id, session_id, principal, action, resource,
        context, entities_hash, policy_hash, decision, reasons, errors, outcome, notes, prev_hash, hash)
    VALUES (new.seq, new.id, new.time, new.org_id, new.session_id, new.principal, new.action,
        new.resource, new.context, new.entities_hash, new.policy_hash, new.decision, new.reasons,
        new.errors, new.outcome, new.notes, new.prev_hash, new.hash);
END;
CREATE TRIGGER decisions_no_update INSTEAD OF UPDATE ON decisions BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only');
END;
CREATE TRIGGER decisions_prune INSTEAD OF DELETE ON decisions BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only: only records behind an anchor may be pruned')
     WHERE old.seq > coalesce((SELECT max(seq) FROM decision_anchors), 0);
    DELETE FROM decisions_indexed WHERE seq = old.seq;
    DELETE FROM decisions_recent WHERE seq = old.seq;
END;
