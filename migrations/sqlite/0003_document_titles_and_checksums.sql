-- A title the user gave the document (shown instead of the one found in the file), and an index to find
-- a tenant's earlier upload of the same file by its checksum.
ALTER TABLE documents ADD COLUMN user_title TEXT;
CREATE INDEX documents_by_checksum ON documents (tenant_id, sha256);
