-- Recall that scales on PostgreSQL: a btree of every (project, term, seq)
-- so a search reads a term's newest matches in a project by walking one
-- index range backwards and stops at its bound, however common the term
-- (the GIN index returns a term's whole posting list, and walking the
-- project's rows newest first reads many rows per match of a rare term).
-- Each entry carries what BM25 needs (the term's occurrences in the row
-- and the row's length); `recall_scopes` numbers the projects and keeps
-- each one's row count and token total. Triggers keep both in the
-- observation's own transaction, so every instance sees them at commit.

CREATE TABLE recall_scopes (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id     TEXT NOT NULL,
    project_id TEXT NOT NULL,
    rows       BIGINT NOT NULL DEFAULT 0,
    tokens     BIGINT NOT NULL DEFAULT 0,
    UNIQUE (org_id, project_id),
    FOREIGN KEY (org_id, project_id) REFERENCES projects(org_id, id) ON DELETE CASCADE
);

CREATE TABLE observation_terms (
    scope BIGINT NOT NULL,
    term  TEXT NOT NULL,
    seq   BIGINT NOT NULL,
    freq  INTEGER NOT NULL,
    len   INTEGER NOT NULL,
    PRIMARY KEY (scope, term, seq) INCLUDE (freq, len)
);

-- A row's tokens as BM25 counts them: every position of every lexeme
-- (a lexeme stored without positions counts once).
CREATE FUNCTION recall_length(v tsvector) RETURNS INTEGER
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0)::INTEGER FROM unnest(v) $$;

CREATE FUNCTION recall_terms_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO recall_scopes (org_id, project_id, rows, tokens)
        SELECT org_id, project_id, count(*), sum(recall_length(search))
        FROM added GROUP BY org_id, project_id
        ORDER BY org_id, project_id
        ON CONFLICT (org_id, project_id) DO UPDATE
        SET rows = recall_scopes.rows + excluded.rows,
            tokens = recall_scopes.tokens + excluded.tokens;
    -- Each row's length once, not once per lexeme.
    WITH a AS MATERIALIZED (
        SELECT seq, org_id, project_id, search, recall_length(search) AS len FROM added
    )
    INSERT INTO observation_terms (scope, term, seq, freq, len)
        SELECT s.id, t.lexeme, a.seq, coalesce(array_length(t.positions, 1), 1), a.len
        FROM a
        JOIN recall_scopes s ON s.org_id = a.org_id AND s.project_id = a.project_id
        CROSS JOIN LATERAL unnest(a.search) t;
    RETURN NULL;
END $$;

CREATE FUNCTION recall_terms_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM observation_terms ot
        USING removed r
        JOIN recall_scopes s ON s.org_id = r.org_id AND s.project_id = r.project_id
        CROSS JOIN LATERAL unnest(r.search) t
        WHERE ot.scope = s.id AND ot.term = t.lexeme AND ot.seq = r.seq;
    UPDATE recall_scopes s
        SET rows = s.rows - g.rows, tokens = s.tokens - g.tokens
        FROM (SELECT org_id, project_id, count(*) AS rows,
                     sum(recall_length(search)) AS tokens
              FROM removed GROUP BY org_id, project_id) g
        WHERE s.org_id = g.org_id AND s.project_id = g.project_id;
    RETURN NULL;
END $$;

-- An edit of what is indexed (rare: the request path only inserts).
CREATE FUNCTION recall_terms_edit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM observation_terms ot USING recall_scopes s
        WHERE s.org_id = OLD.org_id AND s.project_id = OLD.project_id
          AND ot.scope = s.id AND ot.seq = OLD.seq;
    UPDATE recall_scopes SET rows = rows - 1, tokens = tokens - recall_length(OLD.search)
        WHERE org_id = OLD.org_id AND project_id = OLD.project_id;
    INSERT INTO recall_scopes (org_id, project_id, rows, tokens)
        VALUES (NEW.org_id, NEW.project_id, 1, recall_length(NEW.search))
        ON CONFLICT (org_id, project_id) DO UPDATE
        SET rows = recall_scopes.rows + 1, tokens = recall_scopes.tokens + excluded.tokens;
    INSERT INTO observation_terms (scope, term, seq, freq, len)
        SELECT s.id, t.lexeme, NEW.seq, coalesce(array_length(t.positions, 1), 1),
               recall_length(NEW.search)
        FROM recall_scopes s CROSS JOIN LATERAL unnest(NEW.search) t
        WHERE s.org_id = NEW.org_id AND s.project_id = NEW.project_id;
    RETURN NULL;
END $$;

CREATE TRIGGER observations_terms_ai AFTER INSERT ON observations
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION recall_terms_add();
CREATE TRIGGER observations_terms_ad AFTER DELETE ON observations
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION recall_terms_remove();
CREATE TRIGGER observations_terms_au AFTER UPDATE OF content, type, org_id, project_id ON observations
    FOR EACH ROW WHEN (OLD.search IS DISTINCT FROM NEW.search
                       OR OLD.org_id IS DISTINCT FROM NEW.org_id
                       OR OLD.project_id IS DISTINCT FROM NEW.project_id)
    EXECUTE FUNCTION recall_terms_edit();

-- What the store already holds.
INSERT INTO recall_scopes (org_id, project_id, rows, tokens)
    SELECT org_id, project_id, count(*), sum(recall_length(search))
    FROM observations GROUP BY org_id, project_id;
INSERT INTO observation_terms (scope, term, seq, freq, len)
    SELECT s.id, t.lexeme, o.seq, coalesce(array_length(t.positions, 1), 1),
           recall_length(o.search)
    FROM observations o
    JOIN recall_scopes s ON s.org_id = o.org_id AND s.project_id = o.project_id
    CROSS JOIN LATERAL unnest(o.search) t;

-- A project's scope goes with the project, and its entries with it.
CREATE FUNCTION recall_scope_drop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM observation_terms WHERE scope = OLD.id;
    RETURN NULL;
END $$;
CREATE TRIGGER recall_scopes_ad AFTER DELETE ON recall_scopes
    FOR EACH ROW EXECUTE FUNCTION recall_scope_drop();
