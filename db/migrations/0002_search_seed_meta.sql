-- PTXBench store, schema version 2: full-text search, seed keys, store provenance,
-- and evaluations made append-only in the schema itself.

-- Seed keys: a seeded row carries the stable key of its entry in db/seed/, so a
-- re-seed inserts only what is missing and never touches rows a person added
-- (their seed_key is NULL; a UNIQUE index allows any number of NULLs).
ALTER TABLE models ADD COLUMN seed_key TEXT;
CREATE UNIQUE INDEX models_seed_key ON models(seed_key);
ALTER TABLE runs ADD COLUMN seed_key TEXT;
CREATE UNIQUE INDEX runs_seed_key ON runs(seed_key);
ALTER TABLE samples ADD COLUMN seed_key TEXT;
CREATE UNIQUE INDEX samples_seed_key ON samples(seed_key);
ALTER TABLE evaluations ADD COLUMN seed_key TEXT;
CREATE UNIQUE INDEX evaluations_seed_key ON evaluations(seed_key);
ALTER TABLE fixes ADD COLUMN seed_key TEXT;
CREATE UNIQUE INDEX fixes_seed_key ON fixes(seed_key);

-- Where the store came from and what was last seeded into it.
CREATE TABLE meta (
    key         TEXT PRIMARY KEY,   -- created_at, created_by, seed_digest, seeded_at, seed_summary …
    value       TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

-- Full-text search over candidates (code, raw response, source) and over the
-- evidence of judgements. External-content FTS5 tables: the text lives once,
-- in samples/evaluations; rowid = samples.id / evaluations.id. The triggers
-- keep the index in step with every insert, update and delete.
CREATE VIRTUAL TABLE samples_fts USING fts5(
    code, response, source,
    content="samples", content_rowid="id"
);
CREATE TRIGGER samples_ai AFTER INSERT ON samples BEGIN
    INSERT INTO samples_fts (rowid, code, response, source)
    VALUES (new.id, new.code, new.response, new.source);
END;
CREATE TRIGGER samples_ad AFTER DELETE ON samples BEGIN
    INSERT INTO samples_fts (samples_fts, rowid, code, response, source)
    VALUES ('delete', old.id, old.code, old.response, old.source);
END;
CREATE TRIGGER samples_au AFTER UPDATE ON samples BEGIN
    INSERT INTO samples_fts (samples_fts, rowid, code, response, source)
    VALUES ('delete', old.id, old.code, old.response, old.source);
    INSERT INTO samples_fts (rowid, code, response, source)
    VALUES (new.id, new.code, new.response, new.source);
END;
INSERT INTO samples_fts (samples_fts) VALUES ('rebuild');

CREATE VIRTUAL TABLE evaluations_fts USING fts5(
    evidence, assembler_log, category,
    content="evaluations", content_rowid="id"
);
CREATE TRIGGER evaluations_ai AFTER INSERT ON evaluations BEGIN
    INSERT INTO evaluations_fts (rowid, evidence, assembler_log, category)
    VALUES (new.id, new.evidence, new.assembler_log, new.category);
END;
CREATE TRIGGER evaluations_ad AFTER DELETE ON evaluations BEGIN
    INSERT INTO evaluations_fts (evaluations_fts, rowid, evidence, assembler_log, category)
    VALUES ('delete', old.id, old.evidence, old.assembler_log, old.category);
END;
INSERT INTO evaluations_fts (evaluations_fts) VALUES ('rebuild');

-- Re-verifying adds an evaluation; an existing judgement is never rewritten.
CREATE TRIGGER evaluations_append_only BEFORE UPDATE ON evaluations BEGIN
    SELECT RAISE(ABORT, 'evaluations are append-only: add a new evaluation instead of changing one');
END;
CREATE TRIGGER measurements_append_only BEFORE UPDATE ON measurements BEGIN
    SELECT RAISE(ABORT, 'measurements are append-only: add a new evaluation instead of changing one');
END;

