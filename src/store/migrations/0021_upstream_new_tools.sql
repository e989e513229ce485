-- Tools an upstream lists after its first listing are held until approved
-- by default. `approve_new_tools` now means the explicit choice to offer
-- them at once (`"approveNewTools": true`); `hold_first_listing` is the
-- explicit `"approveNewTools": false`, which holds the first listing too.
-- Rows stored before could not tell the old default from an explicit
-- `true`: they take the new default (new tools held), the safe reading.
ALTER TABLE mcp_servers ADD COLUMN hold_first_listing INTEGER NOT NULL DEFAULT 0;
UPDATE mcp_servers SET hold_first_listing = 1 WHERE approve_new_tools = 0;
UPDATE mcp_servers SET approve_new_tools = 0;
