-- The first schema of inloop.db.
--
-- Times are unix milliseconds (NULL: not yet). JSON columns hold what the
-- store's typed fields marshal. Kinds, sources, statuses and methods are plain
-- text checked in Go, not CHECK constraints: SQLite can only change a CHECK by
-- rebuilding the table, and these lists grow. Large artifacts (weights,
-- adapters, checkpoints) are files under the data dir; rows hold their paths.

PRAGMA application_id = 1229868112; -- "INLP"

CREATE TABLE models (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL,
    path         TEXT    NOT NULL UNIQUE,
    architecture TEXT    NOT NULL DEFAULT '',
    params       INTEGER NOT NULL DEFAULT 0,
    bits         INTEGER NOT NULL DEFAULT 0, -- 0: not quantized
    bytes        INTEGER NOT NULL DEFAULT 0,
    source       TEXT    NOT NULL DEFAULT '', -- demo, pulled, folder, quantized, fused
    added_at     INTEGER NOT NULL,
    last_used_at INTEGER
);
CREATE INDEX models_name ON models (name);

CREATE TABLE datasets (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    kind       TEXT    NOT NULL DEFAULT '', -- text, completions, chat, documents, decision
    created_at INTEGER NOT NULL
);

CREATE TABLE dataset_sources (
    id         INTEGER PRIMARY KEY,
    dataset_id INTEGER NOT NULL REFERENCES datasets (id) ON DELETE CASCADE,
    path       TEXT    NOT NULL,
    kind       TEXT    NOT NULL DEFAULT '', -- jsonl, folder
    split      TEXT    NOT NULL DEFAULT '', -- train, valid, test; '' for all
    rows       INTEGER NOT NULL DEFAULT 0,
    problems   TEXT,                        -- JSON [{"line", "message"}] of rows that were skipped
    updated_at INTEGER NOT NULL,
    UNIQUE (dataset_id, path)
);

CREATE TABLE runs (
    id          INTEGER PRIMARY KEY,
    kind        TEXT    NOT NULL, -- train, quantize, pull, decide, tao
    model       TEXT    NOT NULL DEFAULT '', -- as the user named it, kept if the model row goes
    model_id    INTEGER REFERENCES models (id) ON DELETE SET NULL,
    dataset     TEXT    NOT NULL DEFAULT '',
    dataset_id  INTEGER REFERENCES datasets (id) ON DELETE SET NULL,
    params      TEXT,             -- JSON
    status      TEXT    NOT NULL, -- queued, running, done, failed, cancelled, interrupted
    error       TEXT    NOT NULL DEFAULT '',
    result      TEXT,             -- JSON: final figures
    output      TEXT    NOT NULL DEFAULT '', -- path of what the run produced
    created_at  INTEGER NOT NULL,
    started_at  INTEGER,
    finished_at INTEGER
);
CREATE INDEX runs_kind ON runs (kind, id);
CREATE INDEX runs_status ON runs (status);
CREATE INDEX runs_model_id ON runs (model_id);
CREATE INDEX runs_dataset_id ON runs (dataset_id);

-- One row per (run, name, step); the key is also the index a loss curve reads.
-- A resumed run that repeats a step overwrites it. value NULL means NaN.
CREATE TABLE metrics (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name   TEXT    NOT NULL,
    step   INTEGER NOT NULL,
    value  REAL,
    time   INTEGER NOT NULL,
    PRIMARY KEY (run_id, name, step)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
    id         INTEGER PRIMARY KEY,
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    path       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (run_id, step)
);

-- Versions of a model's adapter stack: each weight change (training, RoR, TAO)
-- is a new version that undo can go back to.
CREATE TABLE adapters (
    id             INTEGER PRIMARY KEY,
    model          TEXT    NOT NULL,
    name           TEXT    NOT NULL DEFAULT '',
    path           TEXT    NOT NULL DEFAULT '',
    version        INTEGER NOT NULL,
    parent_version INTEGER,
    run_id         INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    created_at     INTEGER NOT NULL,
    UNIQUE (model, version)
);
CREATE INDEX adapters_run_id ON adapters (run_id);

CREATE TABLE decision_tasks (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    model      TEXT    NOT NULL DEFAULT '',
    adapter    TEXT    NOT NULL DEFAULT '', -- path of the saved decision model
    config     TEXT,                        -- JSON: the task file (questions, options)
    created_at INTEGER NOT NULL
);

CREATE TABLE calibrations (
    id          INTEGER PRIMARY KEY,
    task_id     INTEGER NOT NULL REFERENCES decision_tasks (id) ON DELETE CASCADE,
    run_id      INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    question    TEXT    NOT NULL DEFAULT '', -- '' for the whole task
    temperature REAL    NOT NULL,
    ece_before  REAL,
    ece_after   REAL,
    accuracy    REAL,
    n           INTEGER NOT NULL DEFAULT 0,
    bins_before TEXT, -- JSON reliability bins
    bins_after  TEXT,
    detail      TEXT, -- JSON: NLL, Brier, coverage table, ...
    created_at  INTEGER NOT NULL
);
CREATE INDEX calibrations_task_id ON calibrations (task_id, id);
CREATE INDEX calibrations_run_id ON calibrations (run_id);

CREATE TABLE chats (
    id         INTEGER PRIMARY KEY,
    title      TEXT    NOT NULL DEFAULT '',
    model      TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);

CREATE TABLE messages (
    id              INTEGER PRIMARY KEY,
    chat_id         INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    role            TEXT    NOT NULL, -- system, user, assistant
    content         TEXT    NOT NULL,
    adapter_version INTEGER,          -- the adapter version the reply was generated with
    stats           TEXT,             -- JSON: tokens, tokens/s, time to first token
    confidence      REAL,             -- calibrated confidence of the answer, if known
    created_at      INTEGER NOT NULL
);
CREATE INDEX messages_chat_id ON messages (chat_id, id);

CREATE TABLE feedback (
    id         INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    thumb      INTEGER NOT NULL CHECK (thumb IN (-1, 1)),
    correction TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);
CREATE INDEX feedback_message_id ON feedback (message_id);

-- Adaptation changed weights that outlive the chat, and undo needs the history,
-- so deleting a chat or message keeps its events (the reference becomes NULL).
CREATE TABLE adaptation_events (
    id             INTEGER PRIMARY KEY,
    model          TEXT    NOT NULL DEFAULT '',
    chat_id        INTEGER REFERENCES chats (id) ON DELETE SET NULL,
    message_id     INTEGER REFERENCES messages (id) ON DELETE SET NULL,
    method         TEXT    NOT NULL, -- ttt, ror, tao, deltamem
    ms             REAL    NOT NULL DEFAULT 0,
    version_before INTEGER NOT NULL DEFAULT 0,
    version_after  INTEGER NOT NULL DEFAULT 0,
    detail         TEXT, -- JSON
    undone         INTEGER NOT NULL DEFAULT 0 CHECK (undone IN (0, 1)),
    created_at     INTEGER NOT NULL
);
CREATE INDEX adaptation_events_chat_id ON adaptation_events (chat_id, id);
CREATE INDEX adaptation_events_message_id ON adaptation_events (message_id);
CREATE INDEX adaptation_events_model ON adaptation_events (model, id);
