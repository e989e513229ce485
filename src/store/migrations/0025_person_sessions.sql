-- Sessions of people signed in through an identity provider carry the
-- user they act for (`<issuer>|<subject>`); a person has one session per
-- project, found again on each connection (the index keeps it one when
-- two first connections race).
ALTER TABLE sessions ADD COLUMN user_id TEXT;
CREATE UNIQUE INDEX sessions_person ON sessions(org_id, project_id, user_id) WHERE user_id IS NOT NULL;
