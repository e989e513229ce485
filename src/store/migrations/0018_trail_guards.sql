-- Guards on every table of the trail (`src/store/README.md`, "Guards on
-- the trail"): no UPDATE anywhere; a DELETE only on the trail's own paths.
-- * The move of recent records (`decisions::move_recent`) deletes a recent
--   record only once the indexed table holds the same record (seq and hash).
-- * A prune (`retention::prune`) inserts its anchor, then a permit naming
--   that anchor (`trail_prune_permits`), deletes, and deletes the permit
--   before it commits. Records are deleted only up to the permit's anchor,
--   entity snapshots only while a permit exists; a permit can name only the
--   newest anchor. Nothing else deletes from the trail.
CREATE TABLE trail_prune_permits (
    anchor_seq INTEGER PRIMARY KEY
);
CREATE TRIGGER trail_prune_permits_name_the_anchor BEFORE INSERT ON trail_prune_permits
WHEN new.anchor_seq IS NOT (SELECT seq FROM decision_anchors ORDER BY seq DESC LIMIT 1)
BEGIN
    SELECT RAISE(ABORT, 'a prune permit names the newest anchor');
END;
CREATE TRIGGER trail_prune_permits_no_update BEFORE UPDATE ON trail_prune_permits BEGIN
    SELECT RAISE(ABORT, 'a prune permit is never updated');
END;

DROP TRIGGER decisions_indexed_no_delete;
CREATE TRIGGER decisions_indexed_no_delete BEFORE DELETE ON decisions_indexed
WHEN old.seq > coalesce((SELECT max(anchor_seq) FROM trail_prune_permits), 0)
BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only: only an archive prunes records behind its anchor');
END;
CREATE TRIGGER decisions_recent_no_delete BEFORE DELETE ON decisions_recent
WHEN old.seq > coalesce((SELECT max(anchor_seq) FROM trail_prune_permits), 0)
 AND NOT EXISTS (SELECT 1 FROM decisions_indexed i WHERE i.seq = old.seq AND i.hash = old.hash)
BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only: a recent record leaves only for the indexed table or an archive');
END;
DROP TRIGGER decisions_prune;
CREATE TRIGGER decisions_prune INSTEAD OF DELETE ON decisions BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only: only an archive prunes records behind its anchor')
     WHERE old.seq > coalesce((SELECT max(anchor_seq) FROM trail_prune_permits), 0);
    DELETE FROM decisions_indexed WHERE seq = old.seq;
    DELETE FROM decisions_recent WHERE seq = old.seq;
END;

CREATE TRIGGER entity_snapshots_no_update BEFORE UPDATE ON entity_snapshots BEGIN
    SELECT RAISE(ABORT, 'entity snapshots are append-only');
END;
CREATE TRIGGER entity_snapshots_no_delete BEFORE DELETE ON entity_snapshots
WHEN NOT EXISTS (SELECT 1 FROM trail_prune_permits)
BEGIN
    SELECT RAISE(ABORT, 'entity snapshots are append-only: only an archive prunes them');
END;

CREATE TRIGGER policy_sets_no_update BEFORE UPDATE ON policy_sets BEGIN
    SELECT RAISE(ABORT, 'recorded policy sets are append-only');
END;
CREATE TRIGGER policy_sets_no_delete BEFORE DELETE ON policy_sets BEGIN
    SELECT RAISE(ABORT, 'recorded policy sets are append-only');
END;
