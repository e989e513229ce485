-- The trace index of the trail (the SQLite migration of the same version
-- explains it).
CREATE TABLE decision_traces (
    trace_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (trace_id, seq)
);

INSERT INTO decision_traces (trace_id, seq)
SELECT t, seq FROM (
    SELECT seq, lower(coalesce(
        substring(notes from '"traceId"\s*:\s*"([0-9a-fA-F]{32})"'),
        substring(notes from '"traceparent"\s*:\s*"00-([0-9a-fA-F]{32})-')
    )) AS t
    FROM decisions
) AS noted WHERE t IS NOT NULL;
