-- Candidates a reload's proof refused (`[lifecycle] prove =
-- "refuse-widening"`) and the admin's acceptance of one: kept in the store
-- so an acceptance holds across restarts and for every instance sharing
-- the database. One row per candidate hash (its text is in policy_sets).
CREATE TABLE policy_candidates (
    hash TEXT PRIMARY KEY,
    live_hash TEXT NOT NULL,
    refused_at TEXT NOT NULL,
    accepted_at TEXT,
    accepted_by TEXT
);
