-- Trail retention. `audit archive` exports the oldest records, then prunes
-- them, leaving an anchor: the seq and hash of the last pruned record, from
-- which the remaining chain verifies. Anchors are append-only; the newest
-- one is where the stored chain starts.
CREATE TABLE decision_anchors (
    seq            INTEGER PRIMARY KEY,  -- the last record this archive pruned
    hash           TEXT NOT NULL,        -- its hash (the next record's prev_hash)
    time           TEXT NOT NULL,        -- its decision time
    first_seq      INTEGER NOT NULL,     -- the first record this archive pruned
    prev_hash      TEXT NOT NULL,        -- that record's prev_hash (the archive's start)
    records        INTEGER NOT NULL,
    format         TEXT NOT NULL,        -- jsonl | ocsf
    archive_sha256 TEXT NOT NULL,        -- SHA-256 of the exported file
    archived_at    TEXT NOT NULL
);
CREATE TRIGGER decision_anchors_no_update BEFORE UPDATE ON decision_anchors BEGIN
    SELECT RAISE(ABORT, 'decision anchors are append-only');
END;
CREATE TRIGGER decision_anchors_no_delete BEFORE DELETE ON decision_anchors BEGIN
    SELECT RAISE(ABORT, 'decision anchors are append-only');
END;

-- Records may be deleted only behind an anchor (the archive inserts the
-- anchor first, in the same transaction).
DROP TRIGGER decisions_no_delete;
CREATE TRIGGER decisions_no_delete BEFORE DELETE ON decisions
WHEN old.seq > coalesce((SELECT max(seq) FROM decision_anchors), 0)
BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only: only records behind an anchor may be pruned');
END;

-- Named leases of periodic maintenance, so one instance at a time runs it
-- on a shared database (the retention archive).
CREATE TABLE maintenance_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
