-- The policy set last activated on this database, by any instance, at
-- start-up or by a reload: what a start-up under `[lifecycle] prove =
-- "refuse-widening"` proves its policy files against (its text is in
-- policy_sets). One row, replaced on every activation.
CREATE TABLE policy_active (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    hash TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    activated_by TEXT NOT NULL,
    activated_at TEXT NOT NULL
);
