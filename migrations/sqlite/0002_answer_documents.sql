-- Which documents each question was asked about, so a document's history can be listed.
CREATE TABLE answer_documents (
    answer_id    TEXT NOT NULL REFERENCES answers(id) ON DELETE CASCADE,
    document_id  TEXT NOT NULL,
    PRIMARY KEY (answer_id, document_id)
);
CREATE INDEX answer_documents_by_document ON answer_documents (document_id);
