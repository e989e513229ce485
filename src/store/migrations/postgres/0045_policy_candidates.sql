-- Candidates a reload's proof refused and the admin's acceptance of one
-- (`../0045_policy_candidates.sql`).
CREATE TABLE policy_candidates (
    hash TEXT PRIMARY KEY,
    live_hash TEXT NOT NULL,
    refused_at TEXT NOT NULL,
    accepted_at TEXT,
    accepted_by TEXT
);
