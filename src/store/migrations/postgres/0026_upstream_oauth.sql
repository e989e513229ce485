-- Upstreams registered with OAuth client credentials
-- (`../0026_upstream_oauth.sql`): the authorization server, client id,
-- scope and resource, and the *name* of the variable holding the secret.
ALTER TABLE mcp_servers ADD COLUMN oauth_issuer TEXT;
ALTER TABLE mcp_servers ADD COLUMN oauth_client_id TEXT;
ALTER TABLE mcp_servers ADD COLUMN oauth_secret_env TEXT;
ALTER TABLE mcp_servers ADD COLUMN oauth_scope TEXT;
ALTER TABLE mcp_servers ADD COLUMN oauth_resource TEXT;
