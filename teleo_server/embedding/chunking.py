"""Split texts longer than the model window into overlapping chunks, never truncating.

Chunks are measured in word pieces of the MiniLM tokenizer (splade-tiny shares its vocabulary)
and cut only where a word starts, so a chunk's text re-tokenises to the same word pieces it was
measured with. Each chunk is a character span ``(start, end)`` of the original text.
"""

from __future__ import annotations

from dataclasses import dataclass

from teleo_server.embedding.models import MAX_WINDOW

MAX_CHUNK_TOKENS = MAX_WINDOW - 2  # room for [CLS] and [SEP]


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    chunk_tokens: int = MAX_CHUNK_TOKENS
    overlap: int = 32

    def __post_init__(self) -> None:
        if not 8 <= self.chunk_tokens <= MAX_CHUNK_TOKENS:
            raise ValueError(f"chunk_tokens must be in [8, {MAX_CHUNK_TOKENS}]")
        if not 0 <= self.overlap <= self.chunk_tokens // 2:
            raise ValueError("overlap must be in [0, chunk_tokens // 2]")

    @property
    def signature(self) -> str:
        return f"c{self.chunk_tokens}o{self.overlap}"


class Chunker:
    """Character spans of the chunks of a text.

    Parameters
    ----------
    tokenizer : a ``tokenizers.Tokenizer`` (the dense model's).
    plan : chunk size and overlap, in word pieces.
    """

    def __init__(self, tokenizer, plan: ChunkPlan) -> None:
        self._tok = tokenizer
        self.plan = plan

    def _pieces(self, text: str):
        return self._tok.encode(text, add_special_tokens=False)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """[(start, end)] character spans; one span ``(0, len(text))`` when the text fits."""
        enc = self._pieces(text)
        n = len(enc.ids)
        size, overlap = self.plan.chunk_tokens, self.plan.overlap
        if n <= size:
            return [(0, len(text))]
        offsets = enc.offsets
        words = enc.word_ids
        # a word starts at piece i when its word id differs from piece i-1's
        starts = [i == 0 or words[i] != words[i - 1] for i in range(n)]

        def snap_back(i: int, floor: int) -> int:
            j = i
            while j > floor and not starts[j]:
                j -= 1
            return j if j > floor else i   # one word longer than a chunk: cut inside it

        spans: list[tuple[int, int]] = []
        s = 0
        while True:
            e = n if s + size >= n else snap_back(s + size, s)
            start, end = offsets[s][0], offsets[e - 1][1]
            # a cut inside a word can re-tokenise into more pieces; shrink until it fits
            while e - s > 1 and len(self._pieces(text[start:end]).ids) > size:
                e -= 1
                end = offsets[e - 1][1]
            spans.append((start, end))
            if e >= n:
                return spans
            s = snap_back(max(e - overlap, s + 1), s)


__all__ = ["ChunkPlan", "Chunker", "MAX_CHUNK_TOKENS"]
