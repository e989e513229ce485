-- A2A peers: registered agent cards per org, per-org bridge settings, and
-- the rows the hook-bus subscribers write (load tracking, audit, cost).

-- One registered remote agent. `slug` is fixed at registration: it names the
-- Cedar `PeerAgent` and prefixes every tool, so it never follows later card
-- renames. `secret_env` / `secret_file` name where the bearer credential is
-- found; the credential itself is never stored.
CREATE TABLE agent_cards (
    id               TEXT PRIMARY KEY,
    org_id           TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    slug             TEXT NOT NULL,
    name             TEXT NOT NULL,
    url              TEXT NOT NULL,        -- base URL as registered
    pinned_version   TEXT,                 -- operator's protocol choice, if any
    secret_env       TEXT,
    secret_file      TEXT,
    card             TEXT,                 -- last valid card fetched (JSON)
    card_url         TEXT,                 -- where that card was found
    health           TEXT NOT NULL,        -- healthy | unreachable | invalid
    last_error       TEXT,
    checked_at       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    UNIQUE (org_id, slug)
);
CREATE INDEX agent_cards_org ON agent_cards(org_id, created_at);

CREATE TABLE a2a_settings (
    org_id     TEXT PRIMARY KEY REFERENCES orgs(id) ON DELETE CASCADE,
    timeout_ms INTEGER NOT NULL,
    updated_at TEXT NOT NULL
);

-- Load tracking: one row per bridged call (subscriber `task-instances`).
-- No foreign keys: subscriber rows must never fail a batch they share.
CREATE TABLE a2a_task_instances (
    id            TEXT PRIMARY KEY,        -- the call id carried by its events
    org_id        TEXT NOT NULL,
    agent_card_id TEXT NOT NULL,
    verb          TEXT NOT NULL,
    skill_id      TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    status        TEXT NOT NULL,           -- running | completed | failed | denied
    started_at    TEXT NOT NULL,
    finished_at   TEXT,
    duration_ms   REAL,
    error_code    INTEGER
);
CREATE INDEX a2a_task_instances_card ON a2a_task_instances(agent_card_id, status);

-- Every hook event as emitted (subscriber `audit`).
CREATE TABLE a2a_hook_events (
    seq        INTEGER PRIMARY KEY,
    call_id    TEXT NOT NULL,
    org_id     TEXT NOT NULL,
    phase      TEXT NOT NULL,
    verb       TEXT NOT NULL,
    event      TEXT NOT NULL,              -- the event JSON
    emitted_at TEXT NOT NULL
);
CREATE INDEX a2a_hook_events_call ON a2a_hook_events(call_id);

-- One row per finished call (subscriber `cost`): what the call cost in time
-- and bytes, for chargeback.
CREATE TABLE a2a_cost_events (
    call_id        TEXT PRIMARY KEY,
    org_id         TEXT NOT NULL,
    agent_card_id  TEXT NOT NULL,
    verb           TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    outcome        TEXT NOT NULL,
    duration_ms    REAL NOT NULL,
    request_bytes  INTEGER NOT NULL,
    response_bytes INTEGER NOT NULL,
    emitted_at     TEXT NOT NULL
);
