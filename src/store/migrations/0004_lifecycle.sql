-- Shadow mode: every decision where a candidate policy set disagreed with
-- the active one, with both sides' reasons.
CREATE TABLE shadow_divergences (
    id                 INTEGER PRIMARY KEY,
    decision_id        TEXT NOT NULL,
    time               TEXT NOT NULL,
    action             TEXT NOT NULL,
    principal          TEXT NOT NULL,
    resource           TEXT NOT NULL,
    live_hash          TEXT NOT NULL,
    live_decision      TEXT NOT NULL,
    live_reasons       TEXT NOT NULL,   -- JSON array of policy ids
    live_errors        TEXT NOT NULL,   -- JSON array
    candidate_dir      TEXT NOT NULL,
    candidate_hash     TEXT NOT NULL,
    candidate_decision TEXT NOT NULL,
    candidate_reasons  TEXT NOT NULL,
    candidate_errors   TEXT NOT NULL
);
CREATE INDEX shadow_divergences_time ON shadow_divergences(time, id);

-- Auditor filters on the decision trail (GET /admin/decisions, replay, export).
CREATE INDEX decisions_org ON decisions(org_id, seq);
CREATE INDEX decisions_action ON decisions(action, seq);
CREATE INDEX decisions_principal ON decisions(principal, seq);
