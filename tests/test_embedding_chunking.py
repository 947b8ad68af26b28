"""Long texts are split into overlapping word-aligned chunks, never truncated."""

from __future__ import annotations

import numpy as np
import pytest

from teleo_server.embedding.chunking import MAX_CHUNK_TOKENS, Chunker, ChunkPlan
from teleo_server.embedding.models import load_tokenizer
from teleo_server.embedding.repository import ModelFiles, default_model_dir

FILES = ModelFiles.in_dir(default_model_dir())
pytestmark = pytest.mark.skipif(
    not FILES.dense_tokenizer.is_file(),
    reason="model repository not materialised: run `make models`")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(FILES.dense_tokenizer)


def _pieces(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def _long_text(seed: int, words: int) -> str:
    rng = np.random.default_rng(seed)
    vocab = ("the agent stored a memory about its goal; retrieval uses sparse and dense vectors, "
             "late-interaction reranking, decay (half-life) & MMR. Ünïcode café naïve 東京 "
             "unbelievably-hyphenated-words").split()
    return " ".join(rng.choice(vocab, words))


def test_short_text_is_one_chunk_spanning_everything(tokenizer):
    chunker = Chunker(tokenizer, ChunkPlan())
    assert chunker.spans("  a short memory  ") == [(0, 18)]
    assert chunker.spans("") == [(0, 0)]


@pytest.mark.parametrize("plan", [
    pytest.param(ChunkPlan(), id="default"),
    pytest.param(ChunkPlan(chunk_tokens=32, overlap=8), id="32-8"),
    pytest.param(ChunkPlan(chunk_tokens=16, overlap=0), id="16-0"),
])
@pytest.mark.parametrize("seed", [0, 1])
def test_chunks_fit_overlap_and_cover_every_piece(tokenizer, plan, seed):
    text = _long_text(seed, words=700)
    spans = Chunker(tokenizer, plan).spans(text)
    assert len(spans) > 1
    enc = tokenizer.encode(text, add_special_tokens=False)
    covered = np.zeros(len(enc.ids), bool)
    for (start, end), nxt in zip(spans, spans[1:] + [None]):
        chunk = text[start:end]
        assert len(_pieces(tokenizer, chunk)) <= plan.chunk_tokens
        # the chunk's pieces are exactly the text's pieces inside the span (cut at word starts)
        inside = [i for i, (a, b) in enumerate(enc.offsets) if a >= start and b <= end]
        assert _pieces(tokenizer, chunk) == [enc.ids[i] for i in inside]
        covered[inside] = True
        if nxt is not None:
            assert nxt[0] > start                      # progress
            assert not text[end:nxt[0]].strip()        # nothing but spaces between chunks
            # at least `overlap` shared pieces: the next start snaps back to a word start
            shared = [i for i in inside if enc.offsets[i][0] >= nxt[0]]
            assert plan.overlap <= len(shared) <= plan.overlap + 8
    assert covered.all()
    assert spans[0][0] == 0 and spans[-1][1] == len(text.rstrip())


def test_a_word_longer_than_a_chunk_is_cut_inside_it(tokenizer):
    text = "intro pneumonoultramicroscopicsilicovolcanoconiosis outro"
    assert len(_pieces(tokenizer, text)) > 12
    spans = Chunker(tokenizer, ChunkPlan(chunk_tokens=8, overlap=2)).spans(text)
    assert len(spans) >= 2
    assert all(len(_pieces(tokenizer, text[a:b])) <= 8 for a, b in spans)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(not text[a[1]:b[0]].strip() for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("tokens,overlap", [
    pytest.param(MAX_CHUNK_TOKENS + 1, 0, id="over-window"),
    pytest.param(4, 0, id="too-small"),
    pytest.param(64, 33, id="overlap-over-half"),
    pytest.param(64, -1, id="negative-overlap"),
])
def test_plan_rejects_bad_sizes(tokens, overlap):
    with pytest.raises(ValueError):
        ChunkPlan(tokens, overlap)
