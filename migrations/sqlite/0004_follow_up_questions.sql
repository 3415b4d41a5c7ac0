-- The answer a question follows up (its conversation's previous turn), if any.
ALTER TABLE answers ADD COLUMN follow_up_of TEXT;
