-- The trace index of the trail: the W3C trace id each record's notes name
-- (the `traceId` of the gateway's span, else the caller's `traceparent`),
-- so `audit query --trace` and `/admin/decisions?trace=` read the trace's
-- records by key instead of scanning every record's notes. One row per
-- traced record, written with it (`decisions::insert`) and deleted with it
-- by an archive's prune; filled here for the records already stored.
CREATE TABLE decision_traces (
    trace_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (trace_id, seq)
) WITHOUT ROWID;

INSERT INTO decision_traces (trace_id, seq)
SELECT t, seq FROM (
    SELECT seq, lower(coalesce(
        json_extract(notes, '$.traceId'),
        substr(json_extract(notes, '$.traceparent'), 4, 32)
    )) AS t
    FROM decisions
    WHERE json_valid(notes) AND json_type(notes) = 'object'
) WHERE length(t) = 32;
