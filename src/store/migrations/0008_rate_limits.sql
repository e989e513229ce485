-- Per-org overrides of the rate-limit buckets (`[rate_limits]` in the config).
-- `limits` holds the overridden buckets as JSON, e.g.
-- {"key":{"perSecond":5,"burst":10}}; a bucket left out keeps the default.
CREATE TABLE org_rate_limits (
    org_id     TEXT PRIMARY KEY REFERENCES orgs(id) ON DELETE CASCADE,
    limits     TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
