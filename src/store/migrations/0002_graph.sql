-- Knowledge graph, one per project. Nodes are resolved entities (one row
-- per resolution key); edges are (source, relationship, target) triplets.
CREATE TABLE graph_nodes (
    seq             INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,           -- UUID (also the Cedar GraphNode id)
    org_id          TEXT NOT NULL,
    project_id      TEXT NOT NULL,
    name            TEXT NOT NULL,                  -- first spelling seen
    name_key        TEXT NOT NULL,                  -- entity-resolution key
    type            TEXT NOT NULL,
    description     TEXT NOT NULL,
    observation_id  TEXT,
    session_id      TEXT,
    created_at      TEXT NOT NULL,
    feedback_weight REAL NOT NULL,
    embedding       BLOB,                           -- little-endian f32, L2-normalized
    embed_model     TEXT,
    FOREIGN KEY (org_id, project_id) REFERENCES projects(org_id, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX graph_nodes_key ON graph_nodes(org_id, project_id, name_key);

CREATE TABLE graph_edges (
    seq             INTEGER PRIMARY KEY,
    org_id          TEXT NOT NULL,
    project_id      TEXT NOT NULL,
    source_id       TEXT NOT NULL REFERENCES graph_nodes(id) ON DELETE CASCADE,
    target_id       TEXT NOT NULL REFERENCES graph_nodes(id) ON DELETE CASCADE,
    relationship    TEXT NOT NULL,
    observation_id  TEXT,
    session_id      TEXT,
    created_at      TEXT NOT NULL,
    feedback_weight REAL NOT NULL,
    embedding       BLOB,                           -- triplet embedding (HTTP provider only)
    embed_model     TEXT,
    FOREIGN KEY (org_id, project_id) REFERENCES projects(org_id, id) ON DELETE CASCADE
);
-- Traversal in both directions; the unique index also serves lookups by source.
CREATE UNIQUE INDEX graph_edges_key ON graph_edges(source_id, target_id, relationship);
CREATE INDEX graph_edges_target ON graph_edges(target_id);
CREATE INDEX graph_edges_project ON graph_edges(org_id, project_id);

-- The ingest pipeline pulls a project's unprocessed observations in order.
CREATE INDEX observations_unprocessed ON observations(org_id, project_id, seq) WHERE processed = 0;
