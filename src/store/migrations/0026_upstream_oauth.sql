-- An upstream registered with `auth: {"type": "oauth-client-credentials"}`:
-- the gateway obtains its own token from the authorization server
-- `oauth_issuer` as client `oauth_client_id`, for the resource
-- `oauth_resource` with `oauth_scope` (NULL: none asked). The client secret
-- is read from the environment variable `oauth_secret_env`; only its name
-- is stored. NULL `oauth_issuer`: no such credential (`secret_env` or
-- `secret_file` name a bearer token, as before). The variable has its own
-- column so that a bearer-token reader never sends a client secret.
ALTER TABLE mcp_servers ADD COLUMN oauth_issuer TEXT;
ALTER TABLE mcp_servers ADD COLUMN oauth_client_id TEXT;
ALTER TABLE mcp_servers ADD COLUMN oauth_secret_env TEXT;
ALTER TABLE mcp_servers ADD COLUMN oauth_scope TEXT;
ALTER TABLE mcp_servers ADD COLUMN oauth_resource TEXT;
