-- Keys of the PDP role: the decision applications (`pdp/<app>/`) a key may
-- ask over the AuthZEN API, as a JSON list. A key with none is a daemon
-- key (MCP sessions); a key with some asks only those applications.
ALTER TABLE api_keys ADD COLUMN pdp_apps TEXT NOT NULL DEFAULT '[]';
