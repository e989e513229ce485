-- Gateway instances sharing this database: which policy set each one runs
-- (GET /admin/policies), refreshed by a heartbeat.
CREATE TABLE gateway_instances (
    id           TEXT PRIMARY KEY,
    started_at   TEXT NOT NULL,
    last_seen    TEXT NOT NULL,
    policy_hash  TEXT NOT NULL,
    listen       TEXT NOT NULL,
    version      TEXT NOT NULL
);
