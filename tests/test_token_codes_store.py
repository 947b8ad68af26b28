"""The database keeps per-token (late-interaction) vectors as the codes the index holds.

Real servers on real SQLite files: the stored ``tokens`` rows are the index's codes, tagged with
their codec; a restart appends them without encoding anything and scores as before; float16 rows
of older databases still load; a changed codec re-derives the rows from the text; and Export
carries codes that Import reuses only under the same codec.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from teleo.v1 import memory_pb2 as pb

from teleo_server.client import convert as client_convert
from teleo_server.config import Settings
from teleo_server.domain import ChunkEmbedding, EmbeddingSet, Memory, content_hash
from teleo_server.embedding.base import TextRole
from teleo_server.heads import CodecSpec, TokenCodes
from teleo_server.index.tokens import TokenCodec, TokenStore, to_codes
from teleo_server.store import SQLiteStore
from tests._rpc import status
from tests._server import StubbedServer

NS = "codes"
TEXTS = [
    "The billing outage in March was caused by a stale cache in the Redis cluster.",
    "Runbook: drain the nodes, restore the snapshot, then reopen traffic.",
    "The staging cluster moved from eu-west-1 to us-east-2 in March.",
    "The quarterly offsite will be held in Porto, with a hike on the second day.",
    "Vitamin D supplements did not lower the fracture risk of older adults in the trial.",
]
QUERIES = ["what caused the billing outage", "where is the offsite", "vitamin D and fractures"]
# late_interaction_dim 128, 2 bits; a chunk's tokens pooled by 3, one of at most 64 tokens kept whole
DEFAULT_TAG, DEFAULT_WIDTH = "code2x128:384:s0:p3m64", 32
UNPOOLED = {"spaces": {"E12_late": {"pool": 1}}}


class Running(StubbedServer):
    """One in-thread server on ``root``'s data directory, with a stub and the dev token."""

    def __init__(self, root: Path, server: dict | None = None, **pipeline) -> None:
        # every start loads the indexes from the stored rows (what these tests are about), never
        # from the snapshot of the last stop (tests/test_snapshot.py)
        settings = Settings(port=0, data_dir=root / "data", dev_token_file=root / "token", log_format="json",
                            pipeline=pipeline, **{"index_snapshot": False, **(server or {})})
        super().__init__(settings)
        self.db = settings.db_path

    def store(self, texts: list[str], ns: str = NS) -> list[str]:
        return super().store(texts, ns)

    def retrieve(self, text: str, ns: str = NS) -> list[tuple[str, float, float]]:
        """(id, score, late-interaction score) of each result, best first."""
        events = self.stub.Retrieve(pb.RetrieveRequest(text=text, top_k=5, include_breakdown=True,
                                                       filters=pb.RetrieveFilters(namespaces=[ns])),
                                    metadata=self.auth, timeout=60)
        return [(e.result.memory.id, e.result.score, e.result.breakdown.late_interaction)
                for e in events if e.WhichOneof("event") == "result"]

    def index_codes(self, memory_id: str) -> list[np.ndarray]:
        """The index's codes of each chunk of a memory, read where index calls run (a background
        compaction may be moving rows)."""
        r = self.core.retriever

        def read() -> list[np.ndarray]:
            store, row = r.spaces["E12_late"].store, r.catalog.row_of[memory_id]
            start, count = int(r.catalog.chunk_start[row]), int(r.catalog.chunk_count[row])
            return [store.codes[store.offsets[c]:store.offsets[c + 1]].copy() for c in range(start, start + count)]

        return self.srv.call(self.core._on_index(read))



def _token_rows(db: Path) -> dict[str, list[tuple[str, int, int, bytes]]]:
    """memory id -> (dtype, rows, cols, data) of its tokens rows, by chunk."""
    conn = sqlite3.connect(db)
    try:
        found = conn.execute("SELECT m.id, v.dtype, v.rows, v.cols, v.data FROM chunk_vectors v "
                             "JOIN memories m ON m.pk = v.memory_pk WHERE v.head = 'tokens' ORDER BY m.id, v.idx")
        out: dict[str, list[tuple[str, int, int, bytes]]] = {}
        for memory_id, *row in found:
            out.setdefault(memory_id, []).append(tuple(row))
        return out
    finally:
        conn.close()


def _same_ranking(a: list[tuple[str, float, float]], b: list[tuple[str, float, float]], tol: float) -> None:
    assert [r[0] for r in a] == [r[0] for r in b]
    np.testing.assert_allclose([r[1:] for r in a], [r[1:] for r in b], rtol=0, atol=tol)


def test_stored_tokens_are_the_index_codes_and_a_restart_appends_them_as_they_are(tmp_path, monkeypatch):
    first = Running(tmp_path)
    try:
        ids = first.store(TEXTS)
        rows = _token_rows(first.db)
        for memory_id in ids:
            for (dtype, n, cols, data), codes in zip(rows[memory_id], first.index_codes(memory_id), strict=True):
                assert (dtype, cols) == (DEFAULT_TAG, DEFAULT_WIDTH) and n > 0
                assert len(data) == n * DEFAULT_WIDTH  # 32 bytes a token, not 768
                assert data == codes.tobytes()       # the very bytes the index holds
        before = {q: first.retrieve(q) for q in QUERIES}
        held = {i: first.index_codes(i) for i in ids}
    finally:
        first.stop()
    assert before[QUERIES[0]][0][0] == ids[0] and before[QUERIES[0]][0][2] > 0

    encoded: list[int] = []
    encode = TokenCodec.encode

    def counted(self, tokens):
        encoded.append(len(tokens))
        return encode(self, tokens)

    monkeypatch.setattr(TokenCodec, "encode", counted)
    second = Running(tmp_path)
    try:
        # loaded as codes: no stored memory was encoded (or decoded and encoded again); the one
        # encoding is the start-up warm-up's own sample
        assert len(encoded) == 1
        for memory_id in ids:
            for a, b in zip(second.index_codes(memory_id), held[memory_id], strict=True):
                np.testing.assert_array_equal(a, b)
        monkeypatch.undo()
        for q in QUERIES:
            _same_ranking(second.retrieve(q), before[q], 1e-6)
    finally:
        second.stop()
    # without the warm-up nothing at all is encoded at start-up, and the answers are the same
    encoded.clear()
    monkeypatch.setattr(TokenCodec, "encode", counted)
    third = Running(tmp_path, server={"warm_up": False})
    try:
        assert encoded == []
        monkeypatch.undo()
        for q in QUERIES:
            _same_ranking(third.retrieve(q), before[q], 1e-6)
    finally:
        third.stop()


LONG = ("Our incident review for the March billing outage found that a stale cache entry in the Redis "
        "cluster kept serving old invoice totals after the pricing service had been redeployed. The on-call "
        "engineer first suspected the payment gateway, rolled it back, and only then noticed that the cache "
        "keys carried no version. We now version every cache key with the pricing release, expire entries "
        "after ten minutes, and page the billing team when the invoice totals drift from the ledger by more "
        "than one percent over an hour. The runbook links the dashboards that would have shown it sooner.")


def test_a_long_memory_is_stored_as_fewer_pooled_rows_and_is_found_by_them(tmp_path, monkeypatch):
    threads: list[threading.Thread] = []
    encode = TokenCodec.encode

    def watched(self, tokens):
        threads.append(threading.current_thread())
        return encode(self, tokens)

    monkeypatch.setattr(TokenCodec, "encode", watched)
    server = Running(tmp_path)
    try:
        (long_id,) = server.store([LONG])
        # pooled and coded off the event loop: milliseconds a chunk would hold up every other call
        assert threads and server.srv.thread not in threads
        short_ids = server.store(TEXTS[2:])
        (emb,) = server.srv.call(server.core.embedder.embed([LONG], TextRole.DOCUMENT))
        words = [ch.vectors["tokens"].shape[0] for ch in emb.chunks]
        rows = _token_rows(server.db)
        # max(ceil(T / 3), min(T, 64)) rows a chunk of T tokens: fewer than T once T > 64
        pooled = [max(-(-t // 3), min(t, 64)) for t in words]
        assert min(words) > 64 and [r[1] for r in rows[long_id]] == pooled and sum(pooled) < sum(words)
        assert [c.shape[0] for c in server.index_codes(long_id)] == [r[1] for r in rows[long_id]]
        for memory_id, text in zip(short_ids, TEXTS[2:], strict=True):  # at most 64 tokens: all kept
            (short,) = server.srv.call(server.core.embedder.embed([text], TextRole.DOCUMENT))
            assert [r[1] for r in rows[memory_id]] == [ch.vectors["tokens"].shape[0] for ch in short.chunks]
        hits = server.retrieve("why did invoices show old totals after the pricing redeploy")
        assert hits[0][0] == long_id and hits[0][2] > 0.5  # its late-interaction score, from the pooled rows
    finally:
        server.stop()


def test_sentence_vectors_and_sparse_weights_are_stored_as_float16_and_score_the_same_after_a_restart(tmp_path):
    first = Running(tmp_path)
    try:
        ids = first.store(TEXTS)
        before = {q: first.retrieve(q) for q in QUERIES}
    finally:
        first.stop()
    conn = sqlite3.connect(first.db)
    try:
        rows = conn.execute("SELECT head, kind, dtype, rows, cols, length(data), length(ids) FROM chunk_vectors "
                            "WHERE head IN ('dense', 'splade')").fetchall()
    finally:
        conn.close()
    assert {r[0] for r in rows} == {"dense", "splade"} and len(rows) >= 2 * len(ids)
    for head, kind, dtype, n, cols, data_len, ids_len in rows:
        assert dtype == "float16"
        if kind == "dense":
            assert (n, cols, data_len) == (1, 384, 768)  # 2 bytes a value, not 4
        else:
            assert data_len == 2 * n and ids_len == 2 * n  # float16 weights, uint16 term ids
    second = Running(tmp_path)
    try:
        for q in QUERIES:
            _same_ranking(second.retrieve(q), before[q], 1e-6)
    finally:
        second.stop()


def test_a_float16_row_of_an_older_database_still_loads_and_scores_as_codes_do(tmp_path):
    first = Running(tmp_path)
    try:
        ids = first.store(TEXTS)
        before = {q: first.retrieve(q) for q in QUERIES}
        held = first.index_codes(ids[0])
        # the tokens as an older server stored them: the embedder's float16 (T, 384)
        (emb,) = first.srv.call(first.core.embedder.embed([TEXTS[0]], TextRole.DOCUMENT))
    finally:
        first.stop()
    conn = sqlite3.connect(first.db)
    with conn:
        for idx, chunk in enumerate(emb.chunks):
            tokens = np.ascontiguousarray(chunk.vectors["tokens"], dtype=np.float16)
            conn.execute("UPDATE chunk_vectors SET dtype = 'float16', rows = ?, cols = 384, data = ? WHERE head = 'tokens' "
                         "AND idx = ? AND memory_pk = (SELECT pk FROM memories WHERE id = ?)",
                         (tokens.shape[0], tokens.tobytes(), idx, ids[0]))
    conn.close()
    assert {r[0] for r in _token_rows(first.db)[ids[0]]} == {"float16"}

    second = Running(tmp_path)
    try:
        for a, b in zip(second.index_codes(ids[0]), held, strict=True):
            assert a.shape == b.shape and np.mean(a == b) > 0.99  # encoded on load as when it was stored
        for q in QUERIES:
            _same_ranking(second.retrieve(q), before[q], 1e-3)
        assert second.core._recode == set()
    finally:
        second.stop()
    assert {r[0] for r in _token_rows(first.db)[ids[0]]} == {"float16"}  # read as it is, left as it was


def _wait_for(what, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(0.1)
    raise AssertionError(f"not done after {timeout} s")


@pytest.mark.parametrize("before,after,tag,cols", [
    ({}, {"late_interaction_bits": 4}, "code4x128:384:s0:p3m64", 64),
    # a database written before tokens were pooled, under a pooling that changes these short texts
    (UNPOOLED, {"spaces": {"E12_late": {"pool": 2, "pool_keep": 4}}}, "code2x128:384:s0:p2m4", DEFAULT_WIDTH),
])
def test_a_changed_codec_at_restart_rewrites_the_rows_and_the_memories_are_still_found(tmp_path, before, after, tag, cols):
    first = Running(tmp_path, **before)
    try:
        ids = first.store(TEXTS)
        counts = {i: [r[1] for r in rs] for i, rs in _token_rows(first.db).items()}
        old_tag = first.core.token_specs()["tokens"].tag
    finally:
        first.stop()
    assert old_tag != tag and {r[0] for rs in _token_rows(first.db).values() for r in rs} == {old_tag}

    second = Running(tmp_path, **after)
    try:
        assert second.core.token_specs()["tokens"].tag == tag
        # the old codes are never read as the new codec's: re-derived from the text, rows rewritten
        _wait_for(lambda: {r[0] for rs in _token_rows(second.db).values() for r in rs} == {tag})
        _wait_for(lambda: not second.core._recode)
        rows = _token_rows(second.db)
        for memory_id in ids:
            for (_, n, width, data), codes in zip(rows[memory_id], second.index_codes(memory_id), strict=True):
                assert width == cols and len(data) == n * cols and data == codes.tobytes()
        spec, old = CodecSpec.parse(tag), CodecSpec.parse(old_tag)
        for memory_id in ids:  # max(ceil(T / pool), min(T, keep)) rows a chunk of T tokens
            for was, now in zip(counts[memory_id], (r[1] for r in rows[memory_id]), strict=True):
                assert now == (max(-(-was // spec.pool), min(was, spec.keep)) if old.pool == 1 else was)
        if spec.keep < 16:  # these short texts are pooled only below the default floor
            assert sum(r[1] for rs in rows.values() for r in rs) < sum(map(sum, counts.values()))
        for q, want in zip(QUERIES, (ids[0], ids[3], ids[4]), strict=True):
            hits = second.retrieve(q)
            assert hits[0][0] == want and hits[0][2] > 0
        assert len(second.core.retriever) == len(ids)
    finally:
        second.stop()


def test_upgrading_to_pooled_tokens_re_derives_only_the_chunks_the_pooling_changes(tmp_path):
    first = Running(tmp_path, **UNPOOLED)
    try:
        ids = first.store(TEXTS)
        (long_id,) = first.store([LONG])
        before = _token_rows(first.db)
    finally:
        first.stop()
    assert {r[0] for rs in before.values() for r in rs} == {"code2x128:384:s0"}

    second = Running(tmp_path)
    try:
        # chunks of at most 64 tokens are kept whole: their unpooled codes are this codec's already
        assert second.core._recode <= {long_id}
        _wait_for(lambda: {r[0] for r in _token_rows(second.db)[long_id]} == {DEFAULT_TAG})
        _wait_for(lambda: not second.core._recode)
        after = _token_rows(second.db)
        assert after[long_id][0][1] < before[long_id][0][1]  # pooled, rewritten
        for memory_id in ids:  # read as they were, never embedded again; renamed once, bytes untouched
            assert [(r[0], r[1], r[3]) for r in after[memory_id]] == [(DEFAULT_TAG, r[1], r[3]) for r in before[memory_id]]
            assert [c.tobytes() for c in second.index_codes(memory_id)] == [r[3] for r in before[memory_id]]
        for q, want in zip(QUERIES, (ids[0], ids[3], ids[4]), strict=True):
            hits = second.retrieve(q)
            assert hits[0][0] == want and hits[0][2] > 0
    finally:
        second.stop()

    third = Running(tmp_path)  # every row is the running codec's now: nothing is taken or renamed again
    try:
        assert not third.core._recode
        assert _token_rows(third.db) == after
        hits = third.retrieve(QUERIES[0])
        assert hits[0][0] == ids[0] and hits[0][2] > 0
    finally:
        third.stop()


def test_import_reuses_unpooled_codes_of_chunks_a_pooling_server_keeps_whole(tmp_path):
    source = Running(tmp_path / "a", **UNPOOLED)
    target = Running(tmp_path / "b")
    try:
        ids = source.store(TEXTS[:2] + [LONG])
        exported = list(source.stub.Export(pb.ExportRequest(filters=pb.RetrieveFilters(namespaces=[NS]),
                                                            with_embeddings=True), metadata=source.auth, timeout=60))
        got = target.stub.Import(iter(pb.ImportRequest(item=e) for e in exported), metadata=target.auth, timeout=60)
        assert (got.stored, got.failed, got.vectors_reused) == (3, 0, 2)  # the long one is embedded again
        was, now = _token_rows(source.db), _token_rows(target.db)
        for old, item in zip(ids[:2], got.items[:2], strict=True):
            assert [(r[0], r[1], r[3]) for r in now[item.id]] == [(DEFAULT_TAG, r[1], r[3]) for r in was[old]]
        assert {r[0] for r in now[got.items[2].id]} == {DEFAULT_TAG}
        assert now[got.items[2].id][0][1] < was[ids[2]][0][1]
    finally:
        target.stop()
        source.stop()


def test_export_carries_codes_that_import_reuses_only_under_the_same_codec(tmp_path):
    source = Running(tmp_path / "a")
    other = Running(tmp_path / "b", late_interaction_bits=1)
    try:
        ids = source.store(TEXTS[:3])
        exported = list(source.stub.Export(pb.ExportRequest(filters=pb.RetrieveFilters(namespaces=[NS]),
                                                            with_embeddings=True), metadata=source.auth, timeout=60))
        assert [e.memory.id for e in exported] == ids
        stored = _token_rows(source.db)
        for e in exported:
            for chunk, (_, n, _, data) in zip(e.chunks, stored[e.memory.id], strict=True):
                tokens = chunk.heads["tokens"]
                assert (tokens.codec, tokens.rows, len(tokens.values)) == (DEFAULT_TAG, n, 0)
                assert tokens.codes == data
        # the export file's JSON form keeps the codes
        line = client_convert.exported_json(client_convert.exported(exported[0]))
        assert client_convert.exported_from_json(line) == client_convert.exported(exported[0])

        # the same codec (here the same server, another namespace): the codes are stored as they are
        moved = []
        for e in exported:
            copy = pb.ExportedMemory()
            copy.CopyFrom(e)
            copy.memory.input.namespace = "moved"
            moved.append(copy)
        same = source.stub.Import(iter(pb.ImportRequest(item=e) for e in moved), metadata=source.auth, timeout=60)
        assert (same.stored, same.failed, same.vectors_reused) == (3, 0, 3)
        rows = _token_rows(source.db)
        for old, item in zip(ids, same.items, strict=True):
            assert rows[item.id] == rows[old]
        assert source.retrieve(QUERIES[0], ns="moved")[0][0] == same.items[0].id

        # another codec: the memories are embedded again, never read as that server's codes
        there = other.stub.Import(iter(pb.ImportRequest(item=e) for e in exported), metadata=other.auth, timeout=60)
        assert (there.stored, there.failed, there.vectors_reused) == (3, 0, 0)
        rows = _token_rows(other.db)
        for item in there.items:
            assert {(r[0], r[2]) for r in rows[item.id]} == {("code1x128:384:s0:p3m64", 16)}
        assert other.retrieve(QUERIES[0])[0][0] == there.items[0].id

        # codes that do not fit their codec are refused; a query may not give codes
        bad = pb.ExportedMemory()
        bad.CopyFrom(moved[1])
        bad.memory.input.namespace = "bad"
        bad.chunks[0].heads["tokens"].codes = bad.chunks[0].heads["tokens"].codes[:-1]
        refused = source.stub.Import(iter([pb.ImportRequest(item=bad)]), metadata=source.auth, timeout=60)
        assert refused.items[0].error_code == "INVALID_ARGUMENT" and "tokens" in refused.items[0].error
        version = exported[0].memory.model_version
        query = pb.QueryVectors(model_version=version)
        query.heads["tokens"].CopyFrom(exported[0].chunks[0].heads["tokens"])
        code, details = status(lambda: list(source.stub.Retrieve(pb.RetrieveRequest(vectors=query), metadata=source.auth,
                                                                 timeout=60)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "Import only" in details
    finally:
        other.stop()
        source.stop()


def test_codes_round_trip_through_the_store_and_a_row_naming_no_codec_is_quarantined(tmp_path):
    rng = np.random.default_rng(3)
    codec = TokenStore(128, bits=2, pool=3, keep=64).codec_for(384)
    assert CodecSpec.parse(codec.spec.tag) == codec.spec and codec.spec.tag == DEFAULT_TAG

    def memory(text: str) -> tuple[Memory, EmbeddingSet]:
        tokens = rng.standard_normal((7, 384)).astype(np.float16)
        emb = EmbeddingSet("v1", [ChunkEmbedding({"tokens": tokens}, 0, len(text))])
        return Memory(id=text, namespace=NS, content=text, content_hash=content_hash(text)), to_codes(emb, {"tokens": codec})

    store = SQLiteStore(tmp_path / "t.db")
    good, bad = memory("good"), memory("bad")
    store.put_many([good, bad])
    with store._tx() as conn:
        conn.execute("UPDATE chunk_vectors SET dtype = 'code3x128:384:s0' WHERE memory_pk = "
                     "(SELECT pk FROM memories WHERE id = 'bad')")
    ((m, emb),) = list(store.iter_memories())
    got, want = emb.chunks[0].vectors["tokens"], good[1].chunks[0].vectors["tokens"]
    assert m.id == "good" and isinstance(got, TokenCodes) and got.spec == want.spec
    np.testing.assert_array_equal(got.data, want.data)
    assert "vectors do not decode" in store.quarantined()["bad"]
    # another codec's codes never join a store: they would be read as other vectors
    with pytest.raises(ValueError, match="code2x128:384:s0:p3m64 cannot join a store of code4x128:384:s0:p3m64"):
        TokenStore(128, bits=4, pool=3, keep=64).add(0, got)
    with pytest.raises(ValueError, match="code2x128:384:s0:p3m64 cannot join a store of code2x128:384:s0$"):
        TokenStore(128, bits=2).add(0, got)  # the same bytes a token, but other vectors: not pooled
    store.close()


def test_retagging_renames_only_the_rows_the_pooled_codec_takes(tmp_path):
    """Unpooled codes of a chunk of at most ``keep`` tokens are the pooled codec's as they are:
    renamed, bytes untouched; a longer chunk's, and other codecs' rows, keep their tag."""
    rng = np.random.default_rng(5)
    pooled = TokenStore(128, bits=2, pool=3, keep=64).codec_for(384)
    plain = TokenStore(128, bits=2).codec_for(384)
    four = TokenStore(128, bits=4).codec_for(384)
    assert pooled.spec.unpooled == plain.spec and plain.spec.unpooled is None

    def memory(text: str, lengths: tuple[int, ...], codec: TokenCodec) -> tuple[Memory, EmbeddingSet]:
        chunks = [ChunkEmbedding({"tokens": rng.standard_normal((t, 384)).astype(np.float16)}, 0, len(text))
                  for t in lengths]
        return (Memory(id=text, namespace=NS, content=text, content_hash=content_hash(text)),
                to_codes(EmbeddingSet("v1", chunks), {"tokens": codec}))

    store = SQLiteStore(tmp_path / "t.db")
    store.put_many([memory("short and long", (10, 64, 65), plain), memory("other codec", (10,), four)])
    before = _token_rows(tmp_path / "t.db")
    assert store.retag_tokens("tokens", plain.spec.tag, pooled.spec.tag, pooled.spec.keep) == 2
    after = _token_rows(tmp_path / "t.db")
    assert [r[0] for r in after["short and long"]] == [DEFAULT_TAG, DEFAULT_TAG, plain.spec.tag]
    assert [r[1:] for r in after["short and long"]] == [r[1:] for r in before["short and long"]]
    assert after["other codec"] == before["other codec"]
    assert store.retag_tokens("tokens", plain.spec.tag, pooled.spec.tag, pooled.spec.keep) == 0
    store.close()
