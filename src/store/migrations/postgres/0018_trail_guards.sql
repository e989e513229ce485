-- PostgreSQL translation of 0018_trail_guards.sql. The trail is one table
-- here (`decisions`, whose update and truncate guards date from version 1);
-- its delete guard now asks for a prune permit, and the texts records name
-- (entity snapshots, policy sets) get guards of their own. A permit row is
-- inserted and deleted inside the prune's transaction, so no other session
-- ever sees it.
CREATE TABLE trail_prune_permits (
    anchor_seq BIGINT PRIMARY KEY
);
CREATE FUNCTION trail_prune_permit_names_the_anchor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.anchor_seq IS DISTINCT FROM (SELECT max(seq) FROM decision_anchors) THEN
        RAISE EXCEPTION 'a prune permit names the newest anchor';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER trail_prune_permits_name_the_anchor BEFORE INSERT ON trail_prune_permits
    FOR EACH ROW EXECUTE FUNCTION trail_prune_permit_names_the_anchor();
CREATE FUNCTION trail_prune_permits_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a prune permit is never updated';
END;
$$;
CREATE TRIGGER trail_prune_permits_no_update BEFORE UPDATE ON trail_prune_permits
    FOR EACH ROW EXECUTE FUNCTION trail_prune_permits_fixed();
-- Checked at commit: the prune deleted its permit by then; a permit still
-- there would keep the guards open for later transactions.
CREATE FUNCTION trail_prune_permit_transient() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM trail_prune_permits WHERE anchor_seq = NEW.anchor_seq) THEN
        RAISE EXCEPTION 'a prune permit never outlives its transaction';
    END IF;
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER trail_prune_permits_transient AFTER INSERT ON trail_prune_permits
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION trail_prune_permit_transient();

-- `decisions_no_delete` (version 9) calls this function.
CREATE OR REPLACE FUNCTION decisions_prune_behind_anchor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.seq > coalesce((SELECT max(anchor_seq) FROM trail_prune_permits), 0) THEN
        RAISE EXCEPTION 'the decision trail is append-only: only an archive prunes records behind its anchor';
    END IF;
    RETURN OLD;
END;
$$;

CREATE FUNCTION entity_snapshots_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'entity snapshots are append-only';
END;
$$;
CREATE TRIGGER entity_snapshots_no_update BEFORE UPDATE ON entity_snapshots
    FOR EACH ROW EXECUTE FUNCTION entity_snapshots_append_only();
CREATE TRIGGER entity_snapshots_no_truncate BEFORE TRUNCATE ON entity_snapshots
    FOR EACH STATEMENT EXECUTE FUNCTION entity_snapshots_append_only();
CREATE FUNCTION entity_snapshots_pruned_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM trail_prune_permits) THEN
        RAISE EXCEPTION 'entity snapshots are append-only: only an archive prunes them';
    END IF;
    RETURN OLD;
END;
$$;
CREATE TRIGGER entity_snapshots_no_delete BEFORE DELETE ON entity_snapshots
    FOR EACH ROW EXECUTE FUNCTION entity_snapshots_pruned_only();

CREATE FUNCTION policy_sets_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'recorded policy sets are append-only';
END;
$$;
CREATE TRIGGER policy_sets_no_update BEFORE UPDATE ON policy_sets
    FOR EACH ROW EXECUTE FUNCTION policy_sets_append_only();
CREATE TRIGGER policy_sets_no_delete BEFORE DELETE ON policy_sets
    FOR EACH ROW EXECUTE FUNCTION policy_sets_append_only();
CREATE TRIGGER policy_sets_no_truncate BEFORE TRUNCATE ON policy_sets
    FOR EACH STATEMENT EXECUTE FUNCTION policy_sets_append_only();
