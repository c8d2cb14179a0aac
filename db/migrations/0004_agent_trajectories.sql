-- PTXBench store, schema version 4: agent episodes and their steps (docs/agents.md).
-- An episode is one agent's work on one task: every model reply and every tool call with its
-- arguments, its result and its time, in order, and the kernel it submitted, which is a sample
-- of the episode's run judged in full like any other.

CREATE TABLE agent_episodes (
    id            INTEGER PRIMARY KEY,
    run_id        INTEGER NOT NULL REFERENCES runs(id),
    task_id       TEXT NOT NULL REFERENCES tasks(id),
    sample_index  INTEGER NOT NULL DEFAULT 0,
    sample_id     INTEGER REFERENCES samples(id),  -- what the episode left: the submitted kernel (or the record of none)
    agent         TEXT NOT NULL,                   -- what drove it: "ptxbench run --agent", "ptxbench mcp"
    status        TEXT NOT NULL,                   -- running | submitted | "ended: <why>"
    budgets       TEXT NOT NULL DEFAULT '{}',      -- JSON: tool_calls, tokens, wall_s, turns, gpu_s as asked
    turns         INTEGER NOT NULL DEFAULT 0,      -- model replies
    tool_calls    INTEGER NOT NULL DEFAULT 0,
    tokens_in     INTEGER,                         -- NULL: the endpoint reported no usage
    tokens_out    INTEGER,
    cost          REAL,                            -- as the endpoint reported it (usage.cost), NULL where it did not
    gpu_s         REAL NOT NULL DEFAULT 0,         -- seconds the check and time tools spent judging on a GPU
    wall_s        REAL,
    source        TEXT NOT NULL,
    started_at    TEXT NOT NULL,
    finished_at   TEXT
);
CREATE INDEX agent_episodes_run ON agent_episodes(run_id, task_id, sample_index);
CREATE INDEX agent_episodes_sample ON agent_episodes(sample_id);

-- One row per step, in the order it happened; a step is never changed once written.
CREATE TABLE agent_steps (
    id          INTEGER PRIMARY KEY,
    episode_id  INTEGER NOT NULL REFERENCES agent_episodes(id),
    step        INTEGER NOT NULL,                  -- 1, 2, 3 … within the episode
    kind        TEXT NOT NULL CHECK (kind IN ('model', 'tool', 'note')),
    turn        INTEGER,                           -- the model reply the step belongs to
    tool        TEXT,                              -- kind tool: the name as called (an unknown one too)
    call_id     TEXT,
    arguments   TEXT,                              -- kind tool: the arguments as sent (raw text, JSON or not)
    result      TEXT NOT NULL DEFAULT '{}',        -- JSON: the tool's answer; a model step's content and calls
    status      TEXT NOT NULL,                     -- ok | "error: <why>" | "skipped: <why>"
    seconds     REAL,
    gpu_s       REAL,
    tokens_in   INTEGER,
    tokens_out  INTEGER,
    created_at  TEXT NOT NULL,
    UNIQUE (episode_id, step)
);
CREATE TRIGGER agent_steps_append_only BEFORE UPDATE ON agent_steps BEGIN
    SELECT RAISE(ABORT, 'agent steps are append-only');
END;
