-- Signed checkpoints of the decision trail (`src/audit/checkpoint.rs`):
-- the chain head (seq, hash) signed by the gateway's Ed25519 key, which is
-- kept outside the database, as a C2SP tlog-checkpoint signed note. `kind`
-- is `interval`, `stop` or `anchor` (an archive's anchor, signed with it).
-- Append-only: checkpoints behind the newest anchor go with the records
-- they covered, except the anchors' own.
CREATE TABLE trail_checkpoints (
    id        INTEGER PRIMARY KEY,
    seq       INTEGER NOT NULL,   -- the checkpoint's tree size: the chain position
    hash      TEXT NOT NULL,      -- the record's hash at that position (hex)
    kind      TEXT NOT NULL,
    signed_at TEXT NOT NULL,
    key_id    TEXT NOT NULL,      -- the signing key's id (8 hex digits)
    note      TEXT NOT NULL       -- the signed note, exactly as signed
);
CREATE INDEX trail_checkpoints_seq ON trail_checkpoints (seq);
CREATE TRIGGER trail_checkpoints_no_update BEFORE UPDATE ON trail_checkpoints BEGIN
    SELECT RAISE(ABORT, 'trail checkpoints are append-only');
END;
CREATE TRIGGER trail_checkpoints_no_delete BEFORE DELETE ON trail_checkpoints
WHEN old.kind = 'anchor' OR old.seq > coalesce((SELECT max(seq) FROM decision_anchors), 0)
BEGIN
    SELECT RAISE(ABORT, 'trail checkpoints are append-only: only those behind an anchor may be pruned');
END;
