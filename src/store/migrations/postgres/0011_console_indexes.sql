-- Indexes of the web console's trail queries. The decisions table is read
-- newest first by `seq` (keyset paging, never OFFSET); every filter column
-- has an index that ends in `seq`, so a filtered page walks one index
-- backwards from the cursor. The overview's chart and "most denied" lists
-- read a time window by decision.
CREATE INDEX decisions_resource ON decisions(resource, seq);
CREATE INDEX decisions_decision ON decisions(decision, seq);
CREATE INDEX decisions_decision_time ON decisions(decision, time);
