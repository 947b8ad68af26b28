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

# Append new migrations; never edit a released one.
MIGRATIONS: list[str] = [_V1]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version found before."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise RuntimeError(
            f"database schema version {found} is newer than this server's {SCHEMA_VERSION}; upgrade Teleo"
        )
    for version in range(found, SCHEMA_VERSION):
        # The connection is in autocommit mode; the script is one explicit transaction.
        conn.executescript("BEGIN IMMEDIATE;" + MIGRATIONS[version] + f"PRAGMA user_version = {version + 1}; COMMIT;")
        log.info("store.migrated", to_version=version + 1)
    return found
