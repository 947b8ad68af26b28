"""SQLite schema and its migrations. Each migration runs once, in order, in its own transaction."""

from __future__ import annotations

import sqlite3

import structlog

log = structlog.get_logger(__name__)

_V1 = """
CREATE TABLE memories (
    pk               INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    namespace        TEXT NOT NULL,
    content          TEXT NOT NULL,
    content_hash     TEXT NOT NULL,
    memory_type      INTEGER NOT NULL,
    access_level     INTEGER NOT NULL,
    source           TEXT NOT NULL,
    confidence       REAL NOT NULL,
    importance       REAL NOT NULL,
    event_time       REAL NOT NULL,
    ingestion_time   REAL NOT NULL,
    session_id       TEXT NOT NULL,
    session_position INTEGER,
    links            TEXT NOT NULL,      -- JSON [[target_id, type, weight], ...]
    metadata         TEXT NOT NULL,      -- JSON object of strings
    evergreen        INTEGER NOT NULL,
    model_version    TEXT NOT NULL,
    chunk_count      INTEGER NOT NULL,
    retrieved_count  INTEGER NOT NULL DEFAULT 0,
    used_count       INTEGER NOT NULL DEFAULT 0,
    helpful_count    INTEGER NOT NULL DEFAULT 0,
    UNIQUE (namespace, content_hash)
);
CREATE INDEX memories_model_version ON memories (model_version);
CREATE TABLE chunks (
    memory_pk      INTEGER NOT NULL REFERENCES memories (pk) ON DELETE CASCADE,
    idx            INTEGER NOT NULL,
    start          INTEGER NOT NULL,
    end            INTEGER NOT NULL,
    dim            INTEGER NOT NULL,
    dense          BLOB NOT NULL,        -- float32 (dim,)
    n_tokens       INTEGER NOT NULL,
    tokens         BLOB NOT NULL,        -- float16 (n_tokens, dim)
    sparse_ids     BLOB NOT NULL,        -- int32
    sparse_weights BLOB NOT NULL,        -- float32
    PRIMARY KEY (memory_pk, idx)
);
CREATE TABLE tokens (
    token_id          TEXT PRIMARY KEY,
    token_hash        TEXT NOT NULL UNIQUE,  -- sha256 of the whole token; the token itself is never stored
    agent_id          TEXT NOT NULL,
    read_namespaces   TEXT NOT NULL,         -- JSON list
    write_namespaces  TEXT NOT NULL,         -- JSON list
    access_level      INTEGER NOT NULL,
    default_namespace TEXT NOT NULL,
    created           REAL NOT NULL,
    revoked           REAL,
    note              TEXT NOT NULL
);
"""

# v2: de-duplication is scoped to (namespace, access level, content) and only among memories the
# writer may read, so the table-wide UNIQUE (namespace, content_hash) goes (SQLite drops a
# constraint only by rebuilding the table); rows that cannot be served are quarantined, not deleted.
# Rebuilt with foreign keys off (migrate() turns them off around every migration), so dropping the
# old table does not cascade into chunks; chunks keep pointing at the same pk values.
_V2 = """
CREATE TABLE memories_v2 (
    pk               INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    namespace        TEXT NOT NULL,
    content          TEXT NOT NULL,
    content_hash     TEXT NOT NULL,
    memory_type      INTEGER NOT NULL,
    access_level     INTEGER NOT NULL,
    source           TEXT NOT NULL,
    confidence       REAL NOT NULL,
    importance       REAL NOT NULL,
    event_time       REAL NOT NULL,
    ingestion_time   REAL NOT NULL,
    session_id       TEXT NOT NULL,
    session_position INTEGER,
    links            TEXT NOT NULL,
    metadata         TEXT NOT NULL,
    evergreen        INTEGER NOT NULL,
    model_version    TEXT NOT NULL,
    chunk_count      INTEGER NOT NULL,
    retrieved_count  INTEGER NOT NULL DEFAULT 0,
    used_count       INTEGER NOT NULL DEFAULT 0,
    helpful_count    INTEGER NOT NULL DEFAULT 0,
    quarantine       TEXT                -- NULL, or why the row cannot be served
);
INSERT INTO memories_v2 SELECT *, NULL FROM memories;
DROP TABLE memories;
ALTER TABLE memories_v2 RENAME TO memories;
CREATE INDEX memories_model_version ON memories (model_version);
CREATE INDEX memories_content ON memories (namespace, access_level, content_hash);
"""

# v3: Feedback(helpful=false) is counted.
_V3 = """
ALTER TABLE memories ADD COLUMN misled_count INTEGER NOT NULL DEFAULT 0;
"""

# v4: a chunk's embeddings are one row per named head (teleo_server.heads), self-describing (kind,
# dtype, shape), so a new head needs no schema change. The three fixed columns of v1 become the
# heads "dense", "tokens" and "splade".
_V4 = """
CREATE TABLE vectors_v4 AS
    SELECT memory_pk, idx, 'dense' AS head, 'dense' AS kind, 'float32' AS dtype, 1 AS rows,
           dim AS cols, dense AS data, NULL AS ids FROM chunks
    UNION ALL
    SELECT memory_pk, idx, 'tokens', 'tokens', 'float16', n_tokens, dim, tokens, NULL FROM chunks
    UNION ALL
    SELECT memory_pk, idx, 'splade', 'sparse', 'float32', length(sparse_ids) / 4, 0,
           sparse_weights, sparse_ids FROM chunks;
CREATE TABLE chunks_v4 (
    memory_pk INTEGER NOT NULL REFERENCES memories (pk) ON DELETE CASCADE,
    idx       INTEGER NOT NULL,
    start     INTEGER NOT NULL,
    end       INTEGER NOT NULL,
    PRIMARY KEY (memory_pk, idx)
);
INSERT INTO chunks_v4 SELECT memory_pk, idx, start, end FROM chunks;
DROP TABLE chunks;
ALTER TABLE chunks_v4 RENAME TO chunks;
CREATE TABLE chunk_vectors (
    memory_pk INTEGER NOT NULL,
    idx       INTEGER NOT NULL,
    head      TEXT NOT NULL,
    kind      TEXT NOT NULL,        -- "dense" | "tokens" | "sparse"
    dtype     TEXT NOT NULL,        -- numpy dtype of data
    rows      INTEGER NOT NULL,     -- 1 (dense), word pieces (tokens), terms (sparse)
    cols      INTEGER NOT NULL,     -- vector width; 0 for sparse
    data      BLOB NOT NULL,        -- (rows, cols) values, or a sparse head's weights
    ids       BLOB,                 -- a sparse head's int32 term ids
    PRIMARY KEY (memory_pk, idx, head),
    FOREIGN KEY (memory_pk, idx) REFERENCES chunks (memory_pk, idx) ON DELETE CASCADE
) WITHOUT ROWID;
INSERT INTO chunk_vectors SELECT * FROM vectors_v4;
DROP TABLE vectors_v4;
"""

# v5: Feedback(sufficient=...) is counted: the retrieval's results were enough, or not.
_V5 = """
ALTER TABLE memories ADD COLUMN sufficient_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN insufficient_count INTEGER NOT NULL DEFAULT 0;
"""

# v6: chunk_vectors becomes a rowid table (its key a unique index). A WITHOUT ROWID table keeps at
# most about a quarter of a page of a row in its b-tree and sends the rest to overflow pages it
# fills from the front: every vector blob longer than about 1 KB left most of a 4 KB page empty,
# 40% of the file on SciFact. A rowid table keeps rows of up to a page whole and fills whole
# overflow pages for longer ones. The rows are copied as they are.
_V6 = """
CREATE TABLE chunk_vectors_v6 (
    memory_pk INTEGER NOT NULL,
    idx       INTEGER NOT NULL,
    head      TEXT NOT NULL,
    kind      TEXT NOT NULL,        -- "dense" | "tokens" | "sparse"
    dtype     TEXT NOT NULL,        -- numpy dtype of data (or a codec's tag, below)
    rows      INTEGER NOT NULL,     -- 1 (dense), word pieces (tokens), terms (sparse)
    cols      INTEGER NOT NULL,     -- vector width; 0 for sparse
    data      BLOB NOT NULL,        -- (rows, cols) values, or a sparse head's weights
    ids       BLOB,                 -- a sparse head's term ids: uint16 when length(ids) = 2 * rows, else int32
    UNIQUE (memory_pk, idx, head),
    FOREIGN KEY (memory_pk, idx) REFERENCES chunks (memory_pk, idx) ON DELETE CASCADE
);
INSERT INTO chunk_vectors_v6 SELECT * FROM chunk_vectors ORDER BY memory_pk, idx, head;
DROP TABLE chunk_vectors;
ALTER TABLE chunk_vectors_v6 RENAME TO chunk_vectors;
"""

# chunk_vectors.dtype (v4) is a numpy dtype name ("float32", "float16"), or, for a per-token head kept
# in compact form, the tag of its codec (teleo_server.heads.CodecSpec), "code{bits}x{dim}:{dim_in}:s{seed}",
# e.g. "code2x128:384:s0": dim_in-d vectors rotated by the seeded random orthonormal matrix of `seed`
# to `dim` dimensions, re-normalised, each coordinate a `bits`-bit Gaussian code packed little-endian
# into bytes (float16 values when bits = 16). `rows` is then the token count, `cols` a token's width
# in the codec's values (dim * bits / 8 bytes; dim when bits = 16) and `data` rows * cols of them:
# the very codes the late-interaction index holds. Rows written as float16 before stay valid, so
# this needed no migration; MemoryCore.load_indexes re-derives rows of a codec the configuration no
# longer uses. A tag may end in ":p{pool}" ("code2x128:384:s0:p2"): the chunk's tokens were pooled
# into ceil(T / pool) means of similar tokens before the codes (teleo_server.index.tokens.pool_tokens),
# so `rows` counts those means; no ":p" part means pool 1 (every token kept).

# v7: the database keeps a journal of which memories changed, written by triggers in the same
# transaction as the change, whichever program makes it, so that an index snapshot (snapshot.py)
# stays usable after a crash: the next start reads it and re-indexes only the memories changed
# since. One row per memory: its latest change, with a sequence number that only grows
# (AUTOINCREMENT never reuses one), whether only its bookkeeping counters changed since the journal
# was last pruned (those are copied into the index as they are; any other change means the memory
# is indexed again), and whether the change was the running server's own (`mine`: its indexes
# hold those already; its store sets meta's `server_writes` to 1 for the length of each of its own
# write transactions, so no other connection ever sees it set) or an earlier change of the memory
# folded into the row was not (`others`). `meta` also holds the database's own random id (a
# snapshot names the database it was made from) and how far the journal has been pruned (a snapshot
# older than that cannot be brought up to date). A migration that adds a column the indexes read
# must make the update trigger again with the column in its list (_NOT_COUNTERS, as of v7).
def _journal_entry(row: str, counters: str = "0") -> str:
    """Trigger statements that make the journal's one entry for memory ``row`` (NEW or OLD) its
    latest change: ``counters`` says whether only counters changed; an earlier entry's flags are
    folded in (a pending change that was more than counters, or someone else's), then it goes."""
    return f"""
    INSERT INTO changes (memory_id, counters, mine, others)
        SELECT {row}.id, {counters} AND COALESCE(MIN(counters), 1),
               (SELECT value = '1' FROM meta WHERE key = 'server_writes'),
               COALESCE(MAX(others OR NOT mine), 0)
        FROM changes WHERE memory_id = {row}.id;
    DELETE FROM changes WHERE memory_id = {row}.id AND seq <> last_insert_rowid();"""


# a memory whose every column but these counters is unchanged had only its counters changed
_NOT_COUNTERS = ("id", "namespace", "content", "content_hash", "memory_type", "access_level", "source", "confidence",
                 "importance", "event_time", "ingestion_time", "session_id", "session_position", "links", "metadata",
                 "evergreen", "model_version", "chunk_count", "quarantine")
_ONLY_COUNTERS = " AND ".join(f"OLD.{c} IS NEW.{c}" for c in _NOT_COUNTERS)

_V7 = f"""
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('database_id', lower(hex(randomblob(16))));
INSERT INTO meta (key, value) VALUES ('changes_pruned_through', '0');
INSERT INTO meta (key, value) VALUES ('server_writes', '0');
CREATE TABLE changes (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id TEXT NOT NULL,
    counters  INTEGER NOT NULL,          -- 1: only the memory's counters changed
    mine      INTEGER NOT NULL,          -- 1: made by the server whose indexes hold it
    others    INTEGER NOT NULL DEFAULT 0   -- 1: an earlier change folded into this row was not
);
CREATE INDEX changes_memory ON changes (memory_id);
CREATE TRIGGER changes_on_insert AFTER INSERT ON memories BEGIN{_journal_entry("NEW")}
END;
CREATE TRIGGER changes_on_delete AFTER DELETE ON memories BEGIN{_journal_entry("OLD")}
END;
CREATE TRIGGER changes_on_update_id AFTER UPDATE OF id ON memories WHEN OLD.id IS NOT NEW.id BEGIN{_journal_entry("OLD")}
END;
CREATE TRIGGER changes_on_update AFTER UPDATE ON memories BEGIN{_journal_entry("NEW", _ONLY_COUNTERS)}
END;
"""

# Append new migrations; never edit a released one.
MIGRATIONS: list[str] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version found before."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise RuntimeError(
            f"database schema version {found} is newer than this server's {SCHEMA_VERSION}; upgrade Teleo"
        )
    if found == SCHEMA_VERSION:
        return found
    # Table rebuilds need foreign keys off (the pragma is a no-op inside a transaction); each
    # migration checks them before it commits.
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        for version in range(found, SCHEMA_VERSION):
            # The connection is in autocommit mode; the script is one explicit transaction.
            conn.executescript("BEGIN IMMEDIATE;" + MIGRATIONS[version])
            try:
                broken = conn.execute("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"migration to schema {version + 1} broke {len(broken)} foreign keys")
                conn.execute(f"PRAGMA user_version = {version + 1}")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            log.info("store.migrated", to_version=version + 1)
    finally:
        conn.execute("PRAGMA foreign_keys=ON")
    return found


__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]
