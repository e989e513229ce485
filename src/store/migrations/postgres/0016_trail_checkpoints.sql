-- PostgreSQL translation of 0016_trail_checkpoints.sql.
CREATE TABLE trail_checkpoints (
    id        BIGSERIAL PRIMARY KEY,
    seq       BIGINT NOT NULL,
    hash      TEXT NOT NULL,
    kind      TEXT NOT NULL,
    signed_at TEXT NOT NULL,
    key_id    TEXT NOT NULL,
    note      TEXT NOT NULL
);
CREATE INDEX trail_checkpoints_seq ON trail_checkpoints (seq);
CREATE FUNCTION trail_checkpoints_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.kind <> 'anchor'
       AND OLD.seq <= coalesce((SELECT max(seq) FROM decision_anchors), 0) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'trail checkpoints are append-only: only those behind an anchor may be pruned';
END;
$$;
CREATE TRIGGER trail_checkpoints_no_update BEFORE UPDATE ON trail_checkpoints
    FOR EACH ROW EXECUTE FUNCTION trail_checkpoints_append_only();
CREATE TRIGGER trail_checkpoints_no_delete BEFORE DELETE ON trail_checkpoints
    FOR EACH ROW EXECUTE FUNCTION trail_checkpoints_append_only();
CREATE TRIGGER trail_checkpoints_no_truncate BEFORE TRUNCATE ON trail_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION trail_checkpoints_append_only();
