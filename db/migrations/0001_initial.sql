-- PTXBench store, schema version 1. Every row says where it came from (`source`).
-- Evaluations are append-only: re-verifying adds a row, it never overwrites.

CREATE TABLE tasks (
    id          TEXT PRIMARY KEY,           -- e.g. gemm_bf16_sm90a
    title       TEXT NOT NULL,
    operation   TEXT NOT NULL,
    arch        TEXT NOT NULL,              -- sm_90a | sm_100a
    families    TEXT NOT NULL,              -- JSON list of requested families
    spec        TEXT NOT NULL,              -- JSON of the whole spec
    expert_path TEXT,                       -- repository-relative path of the expert solution
    source      TEXT NOT NULL,              -- e.g. "tasks/specs/gemm_bf16_sm90a.toml"
    updated_at  TEXT NOT NULL
);

CREATE TABLE models (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,       -- e.g. "expert", "qwen3-coder-30b"
    kind        TEXT NOT NULL,              -- model | expert | mutation | import
    endpoint    TEXT,
    params      TEXT NOT NULL DEFAULT '{}', -- JSON
    source      TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

CREATE TABLE runs (
    id              INTEGER PRIMARY KEY,
    model_id        INTEGER NOT NULL REFERENCES models(id),
    name            TEXT NOT NULL,
    context_level   TEXT NOT NULL DEFAULT 'none'    -- none | brief | full
                    CHECK (context_level IN ('none', 'brief', 'full')),
    prompt_version  TEXT,
    params          TEXT NOT NULL DEFAULT '{}',     -- JSON: temperature, max tokens, samples, turns …
    source          TEXT NOT NULL,
    started_at      TEXT NOT NULL,
    finished_at     TEXT
);

CREATE TABLE samples (
    id            INTEGER PRIMARY KEY,
    run_id        INTEGER REFERENCES runs(id),
    task_id       TEXT NOT NULL REFERENCES tasks(id),
    model_id      INTEGER REFERENCES models(id),
    sample_index  INTEGER NOT NULL DEFAULT 0,       -- which of n samples
    turn          INTEGER NOT NULL DEFAULT 1,       -- 1-based turn within a trajectory
    parent_id     INTEGER REFERENCES samples(id),   -- the turn this one follows
    language      TEXT NOT NULL                     -- ptx | cuda | none (extract failed)
                  CHECK (language IN ('ptx', 'cuda', 'none')),
    code          TEXT NOT NULL DEFAULT '',         -- the candidate's code
    manifest      TEXT,                             -- JSON launch manifest, if any
    response      TEXT,                             -- raw model response, stored before anything else
    content_hash  TEXT NOT NULL,
    source        TEXT NOT NULL,                    -- "expert", "mutation of expert:gemm_bf16_sm90a (…)", "model:NAME", "import:FILE"
    tokens_in     INTEGER,
    tokens_out    INTEGER,
    latency_s     REAL,
    created_at    TEXT NOT NULL
);
CREATE INDEX samples_task ON samples(task_id);
CREATE INDEX samples_run ON samples(run_id, task_id, sample_index, turn);  -- a resumed run finds what it stored
CREATE INDEX samples_model ON samples(model_id);
CREATE INDEX samples_parent ON samples(parent_id);
CREATE INDEX samples_hash ON samples(content_hash);

CREATE TABLE evaluations (
    id                  INTEGER PRIMARY KEY,
    sample_id           INTEGER NOT NULL REFERENCES samples(id),
    created_at          TEXT NOT NULL,
    engine_version      TEXT NOT NULL,
    device              TEXT,                   -- "NVIDIA H200" or "cpu (static stages only)"
    driver              TEXT,
    tool_versions       TEXT NOT NULL DEFAULT '{}',  -- JSON: ptxas, cuobjdump, torch, cupy …
    status              TEXT NOT NULL,          -- judged | "skipped: no sm_100a device" | static
    category            TEXT NOT NULL,          -- ok or one vocabulary word
    stage               TEXT,                   -- the stage the category belongs to
    compiled            INTEGER CHECK (compiled IN (0, 1)),         -- NULL = not reached
    correct             INTEGER CHECK (correct IN (0, 1)),          -- on train sizes
    correct_heldout     INTEGER CHECK (correct_heldout IN (0, 1)),  -- on held-out sizes
    uses_ptx            INTEGER CHECK (uses_ptx IN (0, 1)),         -- every requested family in the PTX
    uses_sass           INTEGER CHECK (uses_sass IN (0, 1)),        -- … and in the SASS where it has a distinctive opcode
    executed            INTEGER CHECK (executed IN (0, 1)),         -- … and executed (Nsight Compute), when measured
    ptx_families        TEXT NOT NULL DEFAULT '[]',
    sass_families       TEXT NOT NULL DEFAULT '[]',
    required_missing    TEXT NOT NULL DEFAULT '[]',
    resources           TEXT NOT NULL DEFAULT '{}',   -- registers, shared, spills … per entry
    warnings            TEXT NOT NULL DEFAULT '[]',
    evidence            TEXT NOT NULL DEFAULT '{}',   -- JSON: ptxas message + line, worst element, …
    assembler_log       TEXT,
    ptx                 TEXT,                   -- the PTX judged (for CUDA candidates, nvcc's output)
    sass                TEXT,
    time_ms             REAL,                   -- headline size, median
    baseline_ms         REAL,
    speedup             REAL,                   -- baseline_ms / time_ms
    tflops              REAL,
    source              TEXT NOT NULL           -- what made it: "ptxbench eval", "recorded: scripts/… on NVIDIA H200, 2026-11-29"
);
CREATE INDEX evaluations_sample ON evaluations(sample_id);
CREATE INDEX evaluations_category ON evaluations(category);

-- One row per (evaluation, problem size): train and held-out judged and stored apart.
CREATE TABLE measurements (
    id              INTEGER PRIMARY KEY,
    evaluation_id   INTEGER NOT NULL REFERENCES evaluations(id),
    split           TEXT NOT NULL CHECK (split IN ('train', 'heldout')),
    sizes           TEXT NOT NULL,              -- JSON {"M": 8192, …}
    category        TEXT NOT NULL,
    max_rel_err     REAL,
    worst           TEXT,                       -- JSON: index, got, expected
    time_ms         REAL,
    time_spread     REAL,                       -- (p90 − p10) / median
    baseline_ms     REAL,
    speedup         REAL,
    tflops          REAL
);
CREATE INDEX measurements_eval ON measurements(evaluation_id);

CREATE TABLE fixes (
    id                  INTEGER PRIMARY KEY,
    failed_sample_id    INTEGER NOT NULL REFERENCES samples(id),
    fixed_sample_id     INTEGER NOT NULL REFERENCES samples(id),
    explanation         TEXT NOT NULL,
    explanation_source  TEXT NOT NULL,          -- "written with the mutation", "model:NAME", "derived from diff"
    source              TEXT NOT NULL,
    created_at          TEXT NOT NULL
);
CREATE INDEX fixes_failed ON fixes(failed_sample_id);
CREATE INDEX fixes_fixed ON fixes(fixed_sample_id);

-- A person's triage, beside the automatic category, never over it.
CREATE TABLE labels (
    id                INTEGER PRIMARY KEY,
    sample_id         INTEGER NOT NULL REFERENCES samples(id),
    category          TEXT,
    note              TEXT NOT NULL DEFAULT '',
    fixit_candidate   INTEGER NOT NULL DEFAULT 0 CHECK (fixit_candidate IN (0, 1)),
    author            TEXT NOT NULL,
    created_at        TEXT NOT NULL
);
CREATE INDEX labels_sample ON labels(sample_id);
