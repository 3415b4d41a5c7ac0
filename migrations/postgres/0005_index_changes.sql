-- The ordered log of changes to what the search indexes hold: a document became ready (its chunks became
-- searchable) or was deleted. Each replica keeps its own indexes and applies the changes it has not seen,
-- in `seq` order; `origin` is the process that made the change (its indexes have it already). Writers
-- lock the table until they commit, so rows become visible in `seq` order and a reader never skips one.
CREATE TABLE index_changes (
    seq          BIGSERIAL PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    document_id  TEXT NOT NULL,
    kind         TEXT NOT NULL,
    origin       TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);
