"""Per-query masks of the catalog: readable rows for each access table, kept until a write."""

from __future__ import annotations

import numpy as np

from teleo_server.domain import AccessLevel
from teleo_server.index.catalog import Catalog
from teleo_server.query import Filters, Query
from teleo_server.spaces.base import QueryContext
from bench.harness import memories as syn
from bench.harness.memories import admin, memory

LEVELS = (AccessLevel.PUBLIC, AccessLevel.INTERNAL, AccessLevel.CONFIDENTIAL, AccessLevel.RESTRICTED)


def _expected(cat: Catalog, principal) -> np.ndarray:
    """Row by row, as the access rules say."""
    out = np.zeros(cat.n_rows, dtype=bool)
    for row in range(cat.n_rows):
        if cat.alive[row]:
            m = cat.memory(row)
            out[row] = principal.can_read(m.namespace, m.access_level)
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
    """Equal namespaces, model versions and session ids read from separate rows are kept once, as
    codes into one table each: records read back hold one object for each; the values are unchanged."""
    from dataclasses import replace

    cat = Catalog()
    for i in range(4):
        m = memory(f"m{i}", f"text {i}", namespace="".join(["team", "-a"]))
        m = replace(m, model_version="".join(["v", "1"]), session_id="".join(["s", str(i % 2)]))
        cat.add(m, 1)
    records = [cat.memory(row) for row in range(4)]
    assert {m.namespace for m in records} == {"team-a"} and len({id(m.namespace) for m in records}) == 1
    assert len({id(m.model_version) for m in records}) == 1
    assert [m.session_id for m in records] == ["s0", "s1", "s0", "s1"]
    assert records[0].session_id is records[2].session_id
    updated = replace(records[1], namespace="".join(["team", "-a"]))
    cat.update(updated)
    assert cat.memory(1).namespace is records[0].namespace


def test_shrunk_cuts_in_place_unless_something_else_holds_the_buffer():
    from teleo_server.index.columns import shrunk

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
    records = {mid: r.catalog.memory(r.catalog.row_of[mid]) for mid in ("long", "accented", "short")}
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
    (canary,) = lexical.terms_of("canary")  # the index term, as the analyser makes it ("canari")
    assert lexical.field.df.view[lexical.field.vocab[canary]] == 0

    # a feedback update replaces the record: the new one is packed as well
    updated = replace(records["accented"], used_count=3)
    r.catalog.update(updated)
    assert r.catalog.memory(r.catalog.row_of["accented"]).packed and updated.content == accented


def test_a_record_reads_back_every_field_as_written_through_updates_and_compaction():
    """The catalog keeps a memory as its columns and one byte string, not as the object it was
    given: every field reads back equal (a hash that is not hex, metadata, links, a session, exact
    times and values, counters), a read gives a new object each time, and the record survives a
    feedback update, the removal of other rows and compaction."""
    from dataclasses import replace

    from teleo_server.domain import Link, LinkType, MemoryType

    given = memory("kept", "the canary stage runs before every deployment", namespace="ops",
                   access_level=AccessLevel.CONFIDENTIAL, memory_type=MemoryType.PROCEDURAL, source="runbook.md",
                   confidence=0.37, importance=0.91, event_time=1_700_000_000.25, ingestion_time=1_700_000_100.5,
                   session_id="s-9", session_position=4, evergreen=True, model_version="minilm+splade+r1",
                   metadata={"team": "sre", "ticket": "OPS-12"}, chunk_count=2, retrieved_count=7, used_count=3,
                   helpful_count=2, misled_count=1, sufficient_count=4, insufficient_count=5,
                   links=(Link("other", LinkType.SUPERSEDES, 0.5), Link("third", LinkType.CAUSES)))
    odd_hash = replace(memory("odd", "a note"), content_hash="not-a-sha256")
    upper = replace(memory("upper", "another note"), content_hash="AB" * 32)
    cat = Catalog()
    for m in (memory("gone", "removed soon"), given, odd_hash, upper):
        cat.add(m, 1)
    for m in (given, odd_hash, upper):
        assert cat.memory(cat.row_of[m.id]) == m
    row = cat.row_of["kept"]
    assert cat.memory(row) is not cat.memory(row) and cat.memory(row).links[0].type is LinkType.SUPERSEDES
    read = cat.memory(row)
    read.metadata["team"] = "changed"  # a read is a copy: changing it changes nothing kept
    assert cat.memory(row).metadata["team"] == "sre"
    cat.count_retrieved(["kept"])
    fed = replace(given, retrieved_count=8, helpful_count=3, metadata={"team": "sre"})
    cat.update(fed)
    cat.remove("gone")
    assert "gone" not in cat.row_of and len(cat.row_of) == 3
    keep, _ = cat.compact()
    assert keep.tolist() == [1, 2, 3] and cat.row_of["kept"] == 0
    assert cat.memory(0) == fed and cat.id_of(2) == "upper" and cat.ids_of(np.array([2, 0])) == ["upper", "kept"]
    np.testing.assert_array_equal(cat.feedback_counts(np.array([0, 1])), [[3, 1, 4, 5], [0, 0, 0, 0]])
    # values of NumPy types (as a caller computing times may hand over) are kept as the numbers they are
    numpy_typed = memory("typed", "times from an array", event_time=np.float64(1_700_000_000.5),
                         session_position=np.int64(3), confidence=np.float32(0.5))
    cat.add(numpy_typed, 1)
    read = cat.memory(cat.row_of["typed"])
    assert (read.event_time, read.session_position, read.confidence) == (1_700_000_000.5, 3, 0.5)
    cat.remove("typed")
    # a memory id stored again after its removal (a re-index) is found at its new row only
    cat.remove("odd")
    cat.add(replace(odd_hash, content="a note, edited"), 1)
    assert cat.row_of["odd"] == 4 and cat.memory(4).content == "a note, edited" and len(cat.row_of) == 3


def test_records_cost_no_python_objects_per_memory():
    """Holding more memories holds no more Python objects (the records, ids and metadata-free
    fields live in arrays), so a forked checkpoint pickling them copies no page of objects."""
    import gc

    def reachable(root: object) -> int:
        seen, stack = set(), [root]
        while stack:
            o = stack.pop()
            if id(o) not in seen:
                seen.add(id(o))
                if not isinstance(o, (type, np.ndarray)):
                    stack.extend(gc.get_referents(o))
        return len(seen)

    def objects_after(n: int) -> int:
        cat = Catalog()
        for i in range(n):
            cat.add(memory(f"m{i:05d}", f"note number {i} about the staging cluster", session_id=f"s{i % 3}"), 1)
        cat.settle()  # the newest ids fold into the id table's arrays (as after a bulk load)
        return reachable(cat)

    assert objects_after(3_000) == objects_after(1_000)


def test_a_retrieval_is_counted_on_the_record():
    """The retrieved count moves on the indexed record; a record read before is a copy and does
    not change; an update from the store sets the counters it carries."""
    from dataclasses import replace

    cat = Catalog()
    cat.add(memory("a", "first note", retrieved_count=3), 1)
    cat.add(memory("b", "second note"), 1)
    before = cat.memory(0)
    cat.count_retrieved(["a", "a", "unknown", "b"])
    assert cat.memory(0).retrieved_count == 5 and cat.memory(1).retrieved_count == 1 and before.retrieved_count == 3
    cat.update(replace(before, retrieved_count=9))
    assert cat.memory(0).retrieved_count == 9
    cat.remove("b")
    cat.count_retrieved(["b"])  # removed: nothing to count
    assert "b" not in cat.row_of and cat.memory(0).retrieved_count == 9


def test_a_removed_memorys_metadata_no_longer_selects_any_row_after_compaction():
    """Removal forgets the row under each of its metadata pairs: compaction renumbers the rows
    it keeps, and a row left under a pair would come back as another memory's."""
    cat = Catalog()
    cat.add(memory("tagged", "the tagged note", metadata={"team": "sre"}), 1)
    cat.add(memory("kept", "a kept tagged note", metadata={"team": "sre"}), 1)
    cat.add(memory("other", "another note"), 1)
    cat.remove("tagged")
    cat.compact()
    wanted = Filters(metadata=(("team", "sre"),))
    rows = np.flatnonzero(cat.mask(admin(), wanted))
    assert [cat.id_of(int(r)) for r in rows] == ["kept"]
