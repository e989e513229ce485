-- Keys of the PDP role (`../0044_pdp_keys.sql`): the decision applications
-- a key may ask over the AuthZEN API, as a JSON list.
ALTER TABLE api_keys ADD COLUMN pdp_apps TEXT NOT NULL DEFAULT '[]';
