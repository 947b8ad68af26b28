"""SQLiteStore: durability, de-duplication, embeddings round-trip, migrations, tokens."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace

import numpy as np
import pytest

from teleo_server.domain import AccessLevel, ChunkEmbedding, EmbeddingSet, Link, LinkType, Memory, MemoryType, content_hash
from teleo_server.store import SQLiteStore, StoredToken
from teleo_server.store.schema import SCHEMA_VERSION


def _memory(content: str, ns: str = "a", **kw) -> Memory:
    import uuid

    return Memory(id=uuid.uuid4().hex, namespace=ns, content=content, content_hash=content_hash(content), **kw)


def _emb(rng: np.random.Generator, chunks: int = 1, tokens: int = 5, version: str = "v1") -> EmbeddingSet:
    out = []
    for i in range(chunks):
        d = rng.standard_normal(384).astype(np.float32)
        out.append(
            ChunkEmbedding.from_models(
                dense=d / np.linalg.norm(d),
                tokens=rng.standard_normal((tokens, 384)).astype(np.float16),
                sparse_ids=rng.choice(30522, 7, replace=False).astype(np.int32),
                sparse_weights=rng.random(7).astype(np.float32),
                start=i * 10,
                end=i * 10 + 10,
            )
        )
    return EmbeddingSet(version, out)


def test_put_get_round_trips_every_field_and_embedding(tmp_path):
    rng = np.random.default_rng(0)
    store = SQLiteStore(tmp_path / "t.db")
    m = _memory(
        "hello",
        memory_type=MemoryType.PROCEDURAL,
        access_level=AccessLevel.CONFIDENTIAL,
        source="tool",
        confidence=0.25,
        importance=0.75,
        event_time=1000.5,
        ingestion_time=2000.25,
        session_id="s1",
        session_position=3,
        links=(Link("other", LinkType.CONTRADICTS, 0.5),),
        metadata={"k": "v", "ü": "ß"},
        evergreen=True,
    )
    emb = _emb(rng, chunks=2)
    stored, dup = store.put(m, emb)
    assert not dup and stored.model_version == "v1" and stored.chunk_count == 2
    store.close()

    store = SQLiteStore(tmp_path / "t.db")  # reopened: everything came from disk
    got = store.get([m.id])[m.id]
    assert got == m
    ((mem, loaded),) = list(store.iter_memories())
    assert mem.id == m.id and loaded.model_version == "v1" and len(loaded.chunks) == 2
    for a, b in zip(loaded.chunks, emb.chunks, strict=True):
        assert a.vectors.keys() == b.vectors.keys() == {"dense", "tokens", "splade"}
        np.testing.assert_array_equal(a.vectors["dense"], b.vectors["dense"])
        np.testing.assert_array_equal(a.vectors["tokens"], b.vectors["tokens"])
        np.testing.assert_array_equal(a.vectors["splade"].ids, b.vectors["splade"].ids)
        np.testing.assert_array_equal(a.vectors["splade"].weights, b.vectors["splade"].weights)
        assert (a.start, a.end) == (b.start, b.end)


def test_duplicates_are_per_namespace_and_write_nothing(tmp_path):
    rng = np.random.default_rng(1)
    store = SQLiteStore(tmp_path / "t.db")
    first, dup = store.put(_memory("same"), _emb(rng))
    assert not dup
    again, dup = store.put(_memory("same"), _emb(rng))
    assert dup and again.id == first.id
    other_ns, dup = store.put(_memory("same", ns="b"), _emb(rng))
    assert not dup and other_ns.id != first.id
    # within one batch too
    results = store.put_many([(_memory("x"), _emb(rng)), (_memory("x"), _emb(rng))])
    assert [d for _, d in results] == [False, True] and results[0][0].id == results[1][0].id
    assert sum(n for n, _ in store.count_by_namespace().values()) == 3


def test_duplicates_are_per_access_level_and_only_where_the_writer_dedups(tmp_path):
    rng = np.random.default_rng(11)
    store = SQLiteStore(tmp_path / "t.db")
    secret, _ = store.put(_memory("same", access_level=AccessLevel.RESTRICTED), _emb(rng))
    internal, dup = store.put(_memory("same", access_level=AccessLevel.INTERNAL), _emb(rng))
    assert not dup and internal.id != secret.id
    assert store.find_duplicate("a", AccessLevel.RESTRICTED, content_hash("same")) == secret.id
    # a writer that may not read the scope gets its own copy, also twice in one batch
    results = store.put_many([(_memory("same"), _emb(rng)), (_memory("same"), _emb(rng))], lambda m: False)
    assert [d for _, d in results] == [False, False] and len({m.id for m, _ in results} | {internal.id}) == 3


def test_schema_1_database_migrates_keeping_memories_and_chunks(tmp_path):
    from teleo_server.store.schema import MIGRATIONS

    rng = np.random.default_rng(12)
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript("BEGIN;" + MIGRATIONS[0] + "PRAGMA user_version = 1; COMMIT;")
    conn.close()
    # write rows through today's code paths into the old table, as a v1 server would have
    import teleo_server.store.sqlite as sq

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    m = _memory("kept", access_level=AccessLevel.CONFIDENTIAL)
    m.model_version, m.chunk_count = "v1", 2
    # the columns schema 1 had
    v1_columns = sq._MEMORY_COLUMNS.replace(", misled_count", "").replace(", sufficient_count, insufficient_count", "")
    cur = conn.execute(f"INSERT INTO memories ({v1_columns}) VALUES ({','.join('?' * 21)})", sq._memory_to_row(m)[:21])
    written = _emb(rng, chunks=2)
    for i, c in enumerate(written.chunks):  # the v1 layout: three fixed embedding columns
        dense, tokens, sparse = c.vectors["dense"], c.vectors["tokens"], c.vectors["splade"]
        conn.execute("INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (cur.lastrowid, i, c.start, c.end, dense.size, dense.tobytes(), len(tokens),
                      tokens.tobytes(), sparse.ids.tobytes(), sparse.weights.tobytes()))
    conn.close()

    store = SQLiteStore(path)
    assert store._writer.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store._writer.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert store.get([m.id])[m.id].access_level == AccessLevel.CONFIDENTIAL
    # schema 5: feedback's sufficiency counters start at zero and count
    assert (store.get([m.id])[m.id].sufficient_count, store.get([m.id])[m.id].insufficient_count) == (0, 0)
    counted = store.record_feedback(m.id, used=True, helpful=None, sufficient=False)
    assert (counted.sufficient_count, counted.insufficient_count, counted.helpful_count) == (0, 1, 0)
    [(memory, emb)] = list(store.iter_memories())
    assert memory.id == m.id and len(emb.chunks) == 2
    # schema 4: the three columns became the heads dense, tokens and splade, bit for bit
    for a, b in zip(emb.chunks, written.chunks, strict=True):
        assert a.vectors.keys() == {"dense", "tokens", "splade"} and (a.start, a.end) == (b.start, b.end)
        np.testing.assert_array_equal(a.vectors["dense"], b.vectors["dense"])
        assert a.vectors["tokens"].dtype == np.float16
        np.testing.assert_array_equal(a.vectors["tokens"], b.vectors["tokens"])
        np.testing.assert_array_equal(a.vectors["splade"].ids, b.vectors["splade"].ids)
        np.testing.assert_array_equal(a.vectors["splade"].weights, b.vectors["splade"].weights)
    # the old table-wide UNIQUE (namespace, content_hash) is gone: another level may hold the same text
    other, dup = store.put(_memory("kept", access_level=AccessLevel.PUBLIC), _emb(rng))
    assert not dup and other.id != m.id
    # schema 7: the journal lists what changed since it was made (the feedback's counters, the
    # new memory), not the memories written before it
    assert store.position().change == 2 and store.changes_since(0) == [(m.id, True), (other.id, False)]
    # and deleting still cascades into chunks
    store.delete([m.id, other.id])
    assert store._writer.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 0
    assert store._writer.execute("SELECT COUNT(*) FROM chunk_vectors").fetchone()[0] == 0


def test_sparse_ids_take_two_bytes_when_they_fit_and_four_when_not(tmp_path):
    from teleo_server.heads import SparseVector

    rng = np.random.default_rng(13)
    emb = _emb(rng)
    wide = SparseVector.of(np.array([5, 70_000, 1_000_000], dtype=np.int32), np.array([0.5, 0.25, 1.0], np.float32))
    emb.chunks[0].vectors["wide"] = wide
    store = SQLiteStore(tmp_path / "t.db")
    m, _ = store.put(_memory("ids"), emb)
    sizes = dict(store._writer.execute("SELECT head, length(ids) / rows FROM chunk_vectors WHERE kind = 'sparse'"))
    assert sizes == {"splade": 2, "wide": 4}
    store.close()
    [(_, back)] = list(SQLiteStore(tmp_path / "t.db").iter_memories())
    for head in ("splade", "wide"):
        got, want = back.chunks[0].vectors[head], emb.chunks[0].vectors[head]
        assert got.ids.dtype == np.int32
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_array_equal(got.weights, want.weights)


def test_half_floats_store_float16_unless_a_value_would_not_fit():
    from teleo_server.heads import SparseVector
    from teleo_server.index.precision import half_floats

    emb = _emb(np.random.default_rng(14))
    big = ChunkEmbedding({"dense": np.full(384, 1e6, np.float32),
                          "splade": SparseVector.of([1, 2], [0.5, 7e4])}, 0, 1)
    half = half_floats(EmbeddingSet("v1", [emb.chunks[0], big]))
    kept, wide = half.chunks
    assert kept.vectors["dense"].dtype == np.float16 and kept.vectors["splade"].weights.dtype == np.float16
    np.testing.assert_array_equal(kept.vectors["dense"], emb.chunks[0].vectors["dense"].astype(np.float16))
    assert kept.vectors["tokens"].dtype == np.float16  # per-token vectors are the codecs' business
    assert wide.vectors["dense"].dtype == np.float32 and wide.vectors["splade"].weights.dtype == np.float32


def test_delete_cascades_to_chunks(tmp_path):
    rng = np.random.default_rng(2)
    store = SQLiteStore(tmp_path / "t.db")
    m, _ = store.put(_memory("gone"), _emb(rng, chunks=3))
    assert store.delete([m.id, "nope"]) == 1
    assert store.get([m.id]) == {}
    conn = sqlite3.connect(tmp_path / "t.db")
    assert conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM chunk_vectors").fetchone()[0] == 0


def test_feedback_and_retrieved_counters(tmp_path):
    rng = np.random.default_rng(3)
    store = SQLiteStore(tmp_path / "t.db")
    m, _ = store.put(_memory("fb"), _emb(rng))
    store.record_feedback(m.id, used=True, helpful=True)
    updated = store.record_feedback(m.id, used=True, helpful=False)
    store.record_feedback(m.id, used=False, helpful=None)
    store.record_retrieved([m.id, m.id])
    got = store.get([m.id])[m.id]
    assert (updated.used_count, updated.helpful_count, updated.misled_count) == (2, 1, 1)
    assert (got.used_count, got.helpful_count, got.misled_count) == (2, 1, 1)
    assert got.retrieved_count == 2
    assert store.record_feedback("missing", True, None) is None


def test_the_change_journal_lists_each_changed_memory_once_by_its_latest_change(tmp_path):
    rng = np.random.default_rng(6)
    store = SQLiteStore(tmp_path / "t.db")
    start = store.position()
    assert start.change == 0 and start.pruned == 0 and len(start.database_id) == 32
    assert SQLiteStore(tmp_path / "other.db").position().database_id != start.database_id
    (a, _), (b, _), (c, _) = store.put_many([(_memory(t), _emb(rng)) for t in ("a", "b", "c")])
    assert store.changes_since(0) == [(a.id, False), (b.id, False), (c.id, False)]
    store.put(_memory("a"), _emb(rng))  # a duplicate writes nothing, and changes nothing
    head = store.position().change
    assert head == 3 and store.changes_since(head) == []
    assert store.prune_changes(head) == 3 and store.changes_since(0) == []
    assert store.position() == replace(start, change=head, pruned=head)

    # counters alone: copied, not indexed again; a counter after another change keeps it a change
    store.record_retrieved([a.id])
    store.record_feedback(b.id, used=True, helpful=True)
    store.update(replace(c, importance=0.9), None, None)
    store.record_retrieved([c.id])
    assert store.changes_since(head) == [(a.id, True), (b.id, True), (c.id, False)]
    # an update that keeps the old version: both rows; the latest change of each comes last
    store.update(replace(a, content="a2", content_hash=content_hash("a2")), _emb(rng), "kept-a")
    store.delete([b.id])
    store.quarantine(c.id, "a test")
    assert store.changes_since(head) == [("kept-a", False), (a.id, False), (b.id, False), (c.id, False)]
    assert store.changes_since(store.position().change - 1) == [(c.id, False)]
    # what a start indexes again: the stored, servable ones, with their vectors
    assert sorted(m.id for m, _ in store.indexable([a.id, b.id, c.id, "kept-a", "unknown"])) == sorted([a.id, "kept-a"])
    # another program's write, through SQLite, is listed as well; only it, and the row found
    # unservable, are not this store's own
    assert store.changes_since(head, others_only=True) == [(c.id, False)]
    conn = sqlite3.connect(tmp_path / "t.db")
    with conn:
        conn.execute("DELETE FROM memories WHERE id = 'kept-a'")
        conn.execute("UPDATE memories SET importance = 0.1 WHERE id = ?", (a.id,))
    conn.close()
    assert store.changes_since(head)[-2:] == [("kept-a", False), (a.id, False)]
    # a change of this store's own after another program's still lists the memory as the other's
    store.record_retrieved([a.id])
    assert store.changes_since(head, others_only=True) == [(c.id, False), ("kept-a", False), (a.id, False)]
    # pruning never moves the mark back
    store.prune_changes(1)
    assert store.position().pruned == head


def test_stale_embeddings_are_found_and_replaced(tmp_path):
    rng = np.random.default_rng(4)
    store = SQLiteStore(tmp_path / "t.db")
    old, _ = store.put(_memory("old"), _emb(rng, version="v0"))
    store.put(_memory("new"), _emb(rng, version="v1"))
    assert store.stale_ids("v1") == [old.id]
    store.replace_embeddings(old.id, _emb(rng, chunks=2, version="v1"))
    assert store.stale_ids("v1") == []
    assert store.get([old.id])[old.id].chunk_count == 2


def test_vectors_of_a_text_an_update_replaced_are_not_stored(tmp_path):
    """A re-embedding read the memory before an update changed its text: its vectors are refused."""
    rng = np.random.default_rng(5)
    store = SQLiteStore(tmp_path / "t.db")
    m, _ = store.put(_memory("the text that was read"), _emb(rng, version="v0"))
    changed = replace(m, content="the text an update wrote", content_hash=content_hash("the text an update wrote"))
    store.update(changed, _emb(rng, chunks=3, version="v1"), None)
    assert store.replace_embeddings(m.id, _emb(rng, chunks=1, version="v1"), content_hash=m.content_hash) is None
    assert store.get([m.id])[m.id].chunk_count == 3  # the update's vectors stay
    assert store.replace_embeddings(m.id, _emb(rng, chunks=2, version="v1"), content_hash=changed.content_hash) is not None
    assert store.get([m.id])[m.id].chunk_count == 2


def test_wal_and_full_sync_are_on(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    assert store._writer.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._writer.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert store._writer.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_newer_schema_is_refused(tmp_path):
    SQLiteStore(tmp_path / "t.db").close()
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer"):
        SQLiteStore(tmp_path / "t.db")


def test_tokens_store_only_hashes_and_revoke(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    tok = StoredToken("abc", "agent", ("a",), ("a",), AccessLevel.PUBLIC, "a", time.time(), None, "")
    store.add_token(tok, "h" * 64)
    assert store.token_by_hash("h" * 64) == tok
    assert store.revoke_token("abc", 5.0) and not store.revoke_token("abc", 6.0)
    assert store.token_by_hash("h" * 64).revoked == 5.0
