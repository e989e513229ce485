-- PostgreSQL translation of 0009_trail_retention.sql.
CREATE TABLE decision_anchors (
    seq            BIGINT PRIMARY KEY,
    hash           TEXT NOT NULL,
    time           TEXT NOT NULL,
    first_seq      BIGINT NOT NULL,
    prev_hash      TEXT NOT NULL,
    records        BIGINT NOT NULL,
    format         TEXT NOT NULL,
    archive_sha256 TEXT NOT NULL,
    archived_at    TEXT NOT NULL
);
CREATE FUNCTION decision_anchors_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'decision anchors are append-only';
END;
$$;
CREATE TRIGGER decision_anchors_no_update BEFORE UPDATE ON decision_anchors
    FOR EACH ROW EXECUTE FUNCTION decision_anchors_append_only();
CREATE TRIGGER decision_anchors_no_delete BEFORE DELETE ON decision_anchors
    FOR EACH ROW EXECUTE FUNCTION decision_anchors_append_only();
CREATE TRIGGER decision_anchors_no_truncate BEFORE TRUNCATE ON decision_anchors
    FOR EACH STATEMENT EXECUTE FUNCTION decision_anchors_append_only();

-- Records may be deleted only behind an anchor.
CREATE FUNCTION decisions_prune_behind_anchor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.seq > coalesce((SELECT max(seq) FROM decision_anchors), 0) THEN
        RAISE EXCEPTION 'the decision trail is append-only: only records behind an anchor may be pruned';
    END IF;
    RETURN OLD;
END;
$$;
DROP TRIGGER decisions_no_delete ON decisions;
CREATE TRIGGER decisions_no_delete BEFORE DELETE ON decisions
    FOR EACH ROW EXECUTE FUNCTION decisions_prune_behind_anchor();

CREATE TABLE maintenance_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
