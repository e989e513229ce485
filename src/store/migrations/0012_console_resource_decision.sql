-- The console's "resource + decision" filter: with only `(resource, seq)`
-- a page of a tool's denials walks every record of that tool (about
-- 20,000 at 1M records for a tool never denied) before it can answer
-- "none". This index answers it from the matching rows alone, newest first.
CREATE INDEX decisions_resource_decision ON decisions(resource, decision, seq);
