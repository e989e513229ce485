-- Tools an upstream lists after its first listing are held until approved
-- by default (`../0021_upstream_new_tools.sql`): `approve_new_tools` is
-- the explicit `"approveNewTools": true`, `hold_first_listing` the
-- explicit `false`; rows stored before take the new default.
ALTER TABLE mcp_servers ADD COLUMN hold_first_listing BIGINT NOT NULL DEFAULT 0;
UPDATE mcp_servers SET hold_first_listing = 1 WHERE approve_new_tools = 0;
UPDATE mcp_servers SET approve_new_tools = 0;
