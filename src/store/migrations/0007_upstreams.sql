-- Upstream MCP servers registered per org. `slug` is fixed at registration:
-- it names the Cedar `McpServer` and prefixes every tool. `secret_env` /
-- `secret_file` name where the bearer credential is found; the credential
-- itself is never stored. `tools` holds the definitions as last listed,
-- each with its pinned hash (JSON).
CREATE TABLE mcp_servers (
    id                TEXT PRIMARY KEY,
    org_id            TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    slug              TEXT NOT NULL,
    name              TEXT NOT NULL,
    transport         TEXT NOT NULL,        -- streamable-http
    url               TEXT NOT NULL,
    prefix            TEXT NOT NULL,        -- tool name prefix (the slug)
    secret_env        TEXT,
    secret_file       TEXT,
    timeout_ms        INTEGER NOT NULL,
    approve_new_tools INTEGER NOT NULL,
    tools             TEXT NOT NULL,        -- definitions with pins (JSON array)
    protocol_version  TEXT,                 -- negotiated at the last listing
    health            TEXT NOT NULL,        -- healthy | unreachable | invalid
    last_error        TEXT,
    checked_at        TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    UNIQUE (org_id, slug)
);
CREATE INDEX mcp_servers_org ON mcp_servers(org_id, created_at);
