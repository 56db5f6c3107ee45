-- δ-mem: the online memory of a chat session, one row per version. The state is
-- the adapt/deltamem binary form (a few kilobytes); the newest version is the
-- chat's memory, older ones are what undo goes back to.
CREATE TABLE chat_memories (
    chat_id    INTEGER NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    version    INTEGER NOT NULL,
    memory     TEXT    NOT NULL DEFAULT '', -- the trained memory file the state belongs with
    state      BLOB    NOT NULL,
    writes     INTEGER NOT NULL DEFAULT 0,  -- positions written into the state
    norm       REAL    NOT NULL DEFAULT 0,  -- Frobenius norm of the state, for display
    created_at INTEGER NOT NULL,
    PRIMARY KEY (chat_id, version)
);
