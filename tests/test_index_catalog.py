"""Per-query masks of the catalog: readable rows for each access table, kept until a write."""

from __future__ import annotations

import numpy as np

from teleo_server.domain import AccessLevel
from teleo_server.index.catalog import Catalog
from teleo_server.query import Query
from teleo_server.spaces.base import QueryContext
from bench.harness import memories as syn
from bench.harness.memories import admin, memory

LEVELS = (AccessLevel.PUBLIC, AccessLevel.INTERNAL, AccessLevel.CONFIDENTIAL, AccessLevel.RESTRICTED)


def _expected(cat: Catalog, principal) -> np.ndarray:
    """Row by row, as the access rules say."""
    out = np.zeros(cat.n_rows, dtype=bool)
    for row, m in enumerate(cat.memories):
        out[row] = m is not None and principal.can_read(m.namespace, m.access_level)
    return out


def test_readable_rows_follow_every_write_for_each_access_table():
    cat = Catalog()
    for i in range(40):
        cat.add(memory(f"m{i}", f"note {i}", namespace=("a", "b", "c")[i % 3], access_level=LEVELS[i % 4]), 1)
    readers = [admin(), admin(frozenset({"a"})), admin(frozenset({"a", "c"}), AccessLevel.INTERNAL),
               admin(level=AccessLevel.PUBLIC)]
    for step in range(4):
        for p in readers:
            got = cat.readable(p)
            np.testing.assert_array_equal(got, _expected(cat, p))
            got[:] = True  # a caller changing its copy changes nothing kept
            np.testing.assert_array_equal(cat.readable(p), _expected(cat, p))
        # each write changes what the next reads must see: a removal, a new row, a new namespace
        cat.remove(f"m{step * 5}")
        cat.add(memory(f"new{step}", "later", namespace=("a", "d")[step % 2], access_level=LEVELS[step]), 2)
    keep, _ = cat.compact()
    assert keep.size == cat.n_rows
    # more access tables than are kept, twice over: each answer still its own
    many = [admin(frozenset(ns), level) for ns in ({"a"}, {"b"}, {"c"}, {"a", "b"}, {"b", "d"}, {"c", "d"})
            for level in LEVELS]
    for _ in range(2):
        for p in readers + many:
            np.testing.assert_array_equal(cat.readable(p), _expected(cat, p))


def test_chunk_mask_is_made_from_the_memory_mask_when_first_asked():
    for chunks in ((1, 1, 1, 1), (1, 3, 1, 2)):
        cat = Catalog()
        for i, n in enumerate(chunks):
            cat.add(memory(f"m{i}", f"note {i}"), n)
        mask = np.array([True, False, True, False])
        ctx = QueryContext(Query(text="", embedding=None, principal=admin()), None, cat, mask, None, 0.0)
        want = np.repeat(mask, chunks)
        np.testing.assert_array_equal(ctx.visible_chunks(), want)
        assert ctx.visible_chunks() is ctx.visible_chunks()


def test_records_share_one_string_per_namespace_version_and_session():
    """Equal namespaces, model versions and session ids read from separate rows end up as one
    object in the catalog's records; their values are unchanged."""
    from dataclasses import replace

    cat = Catalog()
    for i in range(4):
        m = memory(f"m{i}", f"text {i}", namespace="".join(["team", "-a"]))
        m = replace(m, model_version="".join(["v", "1"]), session_id="".join(["s", str(i % 2)]))
        cat.add(m, 1)
    records = [m for m in cat.memories if m is not None]
    assert {m.namespace for m in records} == {"team-a"} and len({id(m.namespace) for m in records}) == 1
    assert len({id(m.model_version) for m in records}) == 1
    assert [m.session_id for m in records] == ["s0", "s1", "s0", "s1"]
    assert records[0].session_id is records[2].session_id
    updated = replace(records[1], namespace="".join(["team", "-a"]))
    cat.update(updated)
    assert cat.memories[1].namespace is records[0].namespace


def test_shrunk_cuts_in_place_unless_something_else_holds_the_buffer():
    from teleo_server.index.catalog import shrunk

    a = np.arange(40, dtype=np.int64).reshape(10, 4).copy()
    out = shrunk(a, 3)
    assert out is a and a.shape == (3, 4) and a[2].tolist() == [8, 9, 10, 11]
    b = np.arange(10, dtype=np.int8)
    view = b[:5]  # a view holds the buffer: it is copied, the view stays valid
    out = shrunk(b, 4)
    assert out is not b and out.tolist() == [0, 1, 2, 3] and view.tolist() == [0, 1, 2, 3, 4]
    assert shrunk(np.zeros(5), 0).shape == (1,)


def test_records_the_index_keeps_hold_their_text_deflated_and_read_it_back_unchanged():
    """A long text is kept compressed once every space has read it (a third of its size for
    English prose); reading ``content`` gives the same str, and the lexical space still finds
    and forgets the memory by the words of that text."""
    import sys
    from dataclasses import replace

    from teleo_server.domain import _CONTENT_SLOT
    from teleo_server.index.sparse import HOST_OPS
    from teleo_server.pipeline import PipelineSettings, make_retriever

    long_text = ("The staging cluster moved from eu-west-1 to us-east-2 in March; the canary stage now "
                 "runs before every deployment, and rollbacks take under five minutes. ") * 6
    accented = "Ça coûte 12 € — naïve façade, Müller und Straße, 東京の会議は月曜日です。 " * 12
    r = make_retriever(PipelineSettings(), "numpy")
    for mid, text in (("long", long_text), ("accented", accented), ("short", "a short note about kubernetes")):
        r.add(syn.memory(mid, text), syn.embedding())
    records = {m.id: m for m in r.catalog.memories if m is not None}
    assert records["long"].packed and records["accented"].packed and not records["short"].packed
    assert records["long"].content == long_text and records["accented"].content == accented
    held = _CONTENT_SLOT.__get__(records["long"])
    assert isinstance(held, bytes) and sys.getsizeof(held) < 0.5 * sys.getsizeof(long_text)
    assert replace(records["long"], id="copy").content == long_text  # a copy reads the text, not bytes


    ctx = QueryContext(Query(text="canary rollbacks", embedding=None, principal=admin()), HOST_OPS, r.catalog,
                       r.catalog.alive.copy(), None, 0.0)
    lexical = r.spaces["E6_lexical"]
    rows, _ = lexical.search(ctx, lexical.prepare(ctx), 3)
    assert r.catalog.memory(int(rows[0])).id == "long"
    r.remove(["long"])  # the lexical space re-derives the removed memory's terms from the packed text
    assert lexical.field.df.view[lexical.field.vocab["canary"]] == 0

    # a feedback update replaces the record: the new one is packed as well
    updated = replace(records["accented"], used_count=3)
    r.catalog.update(updated)
    assert r.catalog.memory(r.catalog.row_of["accented"]).packed and updated.content == accented


def test_records_the_index_keeps_share_the_strings_and_values_they_repeat():
    """Two memories built from separate but equal strings (as rows read from the database are) hold
    one namespace, source, session and model version object between them once indexed, and one
    object for equal times and the default confidence; the values read the same."""
    from dataclasses import replace

    from teleo_server.pipeline import PipelineSettings, make_retriever

    def fresh(s: str) -> str:
        return "".join(list(s))  # an equal str that is not the same object

    r = make_retriever(PipelineSettings(), "numpy")
    for mid in ("a", "b"):
        m = replace(syn.memory(mid, f"note {mid} about the staging cluster"), namespace=fresh("team-alpha"),
                    source=fresh("slack-import"), session_id=fresh("session-17"),
                    model_version=fresh("minilm+splade+r1"), confidence=float("1.0"),
                    event_time=1_700_000_000.5, ingestion_time=float("1700000000.5"))
        assert m.ingestion_time is not m.event_time
        r.add(m, syn.embedding())
    a, b = (r.catalog.memory(r.catalog.row_of[i]) for i in ("a", "b"))
    for name in ("namespace", "source", "session_id", "model_version"):
        assert getattr(a, name) is getattr(b, name), name
    assert (a.namespace, a.source, a.session_id, a.model_version) == (
        "team-alpha", "slack-import", "session-17", "minilm+splade+r1")
    assert a.confidence is b.confidence and a.confidence == 1.0
    assert a.ingestion_time is a.event_time and a.event_time == 1_700_000_000.5


def test_a_retrieval_is_counted_on_the_record_in_place():
    """The retrieved count moves on the indexed record itself: no copy read from the store earlier
    (perhaps before an Update) replaces it."""
    cat = Catalog()
    cat.add(memory("a", "first note", retrieved_count=3), 1)
    cat.add(memory("b", "second note"), 1)
    record = cat.memories[0]
    cat.count_retrieved(["a", "a", "unknown", "b"])
    assert cat.memories[0] is record and record.retrieved_count == 5 and cat.memories[1].retrieved_count == 1
    cat.remove("b")
    cat.count_retrieved(["b"])  # removed: nothing to count
    assert cat.memories[1] is None
