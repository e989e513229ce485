-- Tenants. Ids are operator-chosen and become Cedar entity ids.
CREATE TABLE orgs (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    plan         TEXT NOT NULL,
    entitlements TEXT NOT NULL,          -- JSON array of strings
    created_at   TEXT NOT NULL
);

CREATE TABLE projects (
    org_id         TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    id             TEXT NOT NULL,
    memory_enabled INTEGER NOT NULL,
    graph_enabled  INTEGER NOT NULL,
    created_at     TEXT NOT NULL,
    PRIMARY KEY (org_id, id)
);

CREATE TABLE agents (
    org_id     TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    id         TEXT NOT NULL,
    name       TEXT NOT NULL,
    roles      TEXT NOT NULL,            -- JSON array of role ids
    created_at TEXT NOT NULL,
    PRIMARY KEY (org_id, id)
);

-- Daemon keys: only a SHA-256 of the secret part is stored.
CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    label       TEXT NOT NULL,
    secret_hash BLOB NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX api_keys_org ON api_keys(org_id);

CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    org_id           TEXT NOT NULL,
    project_id       TEXT NOT NULL,
    agent_id         TEXT NOT NULL,
    created_by_key   TEXT,
    protocol_version TEXT,
    created_at       TEXT NOT NULL,
    FOREIGN KEY (org_id, project_id) REFERENCES projects(org_id, id) ON DELETE CASCADE,
    FOREIGN KEY (org_id, agent_id) REFERENCES agents(org_id, id) ON DELETE CASCADE
);
CREATE INDEX sessions_org ON sessions(org_id);
CREATE INDEX sessions_project ON sessions(org_id, project_id);
CREATE INDEX sessions_agent ON sessions(org_id, agent_id);

-- Observations (agent memory), searched with FTS5 BM25.
CREATE TABLE observations (
    seq        INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    org_id     TEXT NOT NULL,
    project_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    agent_id   TEXT NOT NULL,
    content    TEXT NOT NULL,
    type       TEXT,
    confidence REAL,
    processed  INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    FOREIGN KEY (org_id, project_id) REFERENCES projects(org_id, id) ON DELETE CASCADE
);
CREATE INDEX observations_project ON observations(org_id, project_id, seq);

CREATE VIRTUAL TABLE observations_fts USING fts5(
    content, type,
    content = 'observations', content_rowid = 'seq',
    tokenize = 'porter unicode61'
);
CREATE TRIGGER observations_ai AFTER INSERT ON observations BEGIN
    INSERT INTO observations_fts(rowid, content, type) VALUES (new.seq, new.content, coalesce(new.type, ''));
END;
CREATE TRIGGER observations_ad AFTER DELETE ON observations BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, content, type)
        VALUES ('delete', old.seq, old.content, coalesce(old.type, ''));
END;
CREATE TRIGGER observations_au AFTER UPDATE OF content, type ON observations BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, content, type)
        VALUES ('delete', old.seq, old.content, coalesce(old.type, ''));
    INSERT INTO observations_fts(rowid, content, type) VALUES (new.seq, new.content, coalesce(new.type, ''));
END;

-- Content-addressed entity slices and policy sets that decisions used,
-- so any decision can be re-run exactly.
CREATE TABLE entity_snapshots (
    hash     TEXT PRIMARY KEY,
    entities TEXT NOT NULL
);

CREATE TABLE policy_sets (
    hash        TEXT PRIMARY KEY,
    schema_path TEXT NOT NULL,
    schema_text TEXT NOT NULL,
    files       TEXT NOT NULL,           -- JSON [{path, text}]
    loaded_at   TEXT NOT NULL
);

-- The decision trail: append-only, hash-chained (hash covers prev_hash and
-- every other column's stored text).
CREATE TABLE decisions (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    time          TEXT NOT NULL,
    org_id        TEXT,
    session_id    TEXT,
    principal     TEXT NOT NULL,
    action        TEXT NOT NULL,
    resource      TEXT NOT NULL,
    context       TEXT NOT NULL,
    entities_hash TEXT NOT NULL,
    policy_hash   TEXT NOT NULL,
    decision      TEXT NOT NULL,
    reasons       TEXT NOT NULL,
    errors        TEXT NOT NULL,
    outcome       TEXT NOT NULL,
    notes         TEXT NOT NULL,
    prev_hash     TEXT NOT NULL,
    hash          TEXT NOT NULL
);
CREATE INDEX decisions_time ON decisions(time);
CREATE INDEX decisions_session ON decisions(session_id, seq);

CREATE TRIGGER decisions_no_update BEFORE UPDATE ON decisions BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only');
END;
CREATE TRIGGER decisions_no_delete BEFORE DELETE ON decisions BEGIN
    SELECT RAISE(ABORT, 'the decision trail is append-only');
END;
