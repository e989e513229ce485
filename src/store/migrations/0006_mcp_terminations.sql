-- MCP sessions a client ended with DELETE (Streamable HTTP), shared by every
-- instance of the database: a request carrying the id on any instance
-- answers 404 until an `initialize` starts a new MCP session.
CREATE TABLE mcp_terminations (
    session_id    TEXT PRIMARY KEY,
    terminated_at TEXT NOT NULL
);
