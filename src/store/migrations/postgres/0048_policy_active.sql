-- The policy set last activated on this database
-- (`../0048_policy_active.sql`).
CREATE TABLE policy_active (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    hash TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    activated_by TEXT NOT NULL,
    activated_at TEXT NOT NULL
);
