-- Which tokenizer counted a document's tokens (a digest of the generator's tokenizer.json). A server that
-- starts with another generator recounts the documents counted by a different one, so the router's fit
-- and cost signals stay in the units of the model that reads the prompts. NULL: counted before this
-- column existed, by an unknown tokenizer (recounted once).
ALTER TABLE documents ADD COLUMN counted_by TEXT;
