-- docqa schema, PostgreSQL dialect. Times are Unix milliseconds; ids are UUID strings except chunk ids,
-- which the search indexes use as their keys.

CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL
);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT REFERENCES tenants(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    prefix       TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    is_admin     BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    revoked_at   BIGINT
);

CREATE TABLE collections (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE documents (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    collection_id  TEXT REFERENCES collections(id) ON DELETE SET NULL,
    file_name      TEXT NOT NULL,
    content_type   TEXT,
    size_bytes     BIGINT NOT NULL,
    sha256         TEXT NOT NULL,
    status         TEXT NOT NULL,
    error          TEXT,
    format         TEXT,
    title          TEXT,
    page_count     BIGINT,
    char_count     BIGINT,
    token_count    BIGINT,
    chunk_count    BIGINT,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX documents_by_tenant ON documents (tenant_id, created_at);

CREATE TABLE document_texts (
    document_id  TEXT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
    text         TEXT NOT NULL,
    page_starts  TEXT NOT NULL
);

CREATE TABLE chunks (
    id           BIGSERIAL PRIMARY KEY,
    document_id  TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    tenant_id    TEXT NOT NULL,
    ordinal      BIGINT NOT NULL,
    text         TEXT NOT NULL,
    char_start   BIGINT NOT NULL,
    char_end     BIGINT NOT NULL,
    page_start   BIGINT NOT NULL,
    page_end     BIGINT NOT NULL,
    token_count  BIGINT NOT NULL,
    embedding    BYTEA NOT NULL
);
CREATE INDEX chunks_by_document ON chunks (document_id, ordinal);
CREATE INDEX chunks_by_tenant ON chunks (tenant_id);

CREATE TABLE jobs (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    document_id   TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    status        TEXT NOT NULL,
    step          TEXT NOT NULL,
    progress      DOUBLE PRECISION NOT NULL DEFAULT 0,
    error         TEXT,
    attempts      BIGINT NOT NULL DEFAULT 0,
    worker        TEXT,
    heartbeat_at  BIGINT,
    created_at    BIGINT NOT NULL,
    started_at    BIGINT,
    finished_at   BIGINT
);
CREATE INDEX jobs_by_status ON jobs (status, created_at);

CREATE TABLE answers (
    id                 TEXT PRIMARY KEY,
    tenant_id          TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    question           TEXT NOT NULL,
    scope              TEXT NOT NULL,
    route_requested    TEXT NOT NULL,
    route              TEXT,
    route_reasons      TEXT,
    status             TEXT NOT NULL,
    text               TEXT,
    citations          TEXT,
    timings            TEXT,
    prompt_tokens      BIGINT,
    cached_tokens      BIGINT,
    completion_tokens  BIGINT,
    error              TEXT,
    created_at         BIGINT NOT NULL,
    finished_at        BIGINT
);
CREATE INDEX answers_by_tenant ON answers (tenant_id, created_at);
