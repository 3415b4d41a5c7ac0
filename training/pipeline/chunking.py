"""Chunks and retrieval for building training prompts the way docqa builds its own.

docqa chunks a document at sentence boundaries into pieces of at most 256 generator tokens, the next
chunk repeating the previous one's last whole sentences up to 32 tokens (indexer/src/chunk), and fills
the RAG window with the best chunks of a hybrid BM25 + dense search, laid out in document order. This
module does the same with a plain BM25 (words for English, characters and character pairs for Chinese):
close enough that the reader sees prompts of docqa's shape, with passages of varying relevance.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

MAX_TOKENS = 256
OVERLAP_TOKENS = 32

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])[\"'”’)\]]*\s+|(?<=[。！？])|\n\s*\n|\n")
_WORD = re.compile(r"[a-z0-9]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


@dataclass
class Chunk:
    start: int  # character offset of the first character in the document
    end: int  # character offset past the last character
    text: str
    tokens: int


def sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences (and lines) of `text`, without surrounding whitespace."""
    cuts = [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]
    out, start = [], 0
    for cut in cuts:
        s, e = start, cut
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            out.append((s, e))
        start = max(start, cut)
    return out


def chunk(text: str, count_tokens) -> list[Chunk]:
    """Greedy sentence packing with whole-sentence overlap; `count_tokens(list[str]) -> list[int]`."""
    spans = split_long(text, sentences(text), count_tokens)
    counts = count_tokens([text[s:e] for s, e in spans])
    chunks, first = [], 0
    while first < len(spans):
        end, used = first, 0
        while end < len(spans) and (end == first or used + counts[end] <= MAX_TOKENS):
            used += counts[end]
            end += 1
        s, e = spans[first][0], spans[end - 1][1]
        chunks.append(Chunk(s, e, text[s:e], used))
        if end >= len(spans):
            break
        back, repeated = end, 0
        while back - 1 > first and repeated + counts[back - 1] <= OVERLAP_TOKENS:
            back -= 1
            repeated += counts[back]
        first = back
    return chunks


def split_long(text: str, spans, count_tokens):
    """Cuts sentences longer than a chunk into pieces that fit (by characters, in proportion)."""
    counts = count_tokens([text[s:e] for s, e in spans])
    out = []
    for (s, e), n in zip(spans, counts):
        if n <= MAX_TOKENS:
            out.append((s, e))
            continue
        pieces = math.ceil(n / (MAX_TOKENS * 0.9))
        step = math.ceil((e - s) / pieces)
        out.extend((a, min(a + step, e)) for a in range(s, e, step))
    return out


def terms(text: str) -> list[str]:
    lower = text.lower()
    words = _WORD.findall(lower)
    chars = _CJK.findall(lower)
    pairs = [a + b for a, b in zip(chars, chars[1:])]
    return words + chars + pairs


class Bm25:
    """BM25 (k1 = 1.2, b = 0.75) over one document's chunks."""

    def __init__(self, texts: list[str]):
        self.docs = [Counter(terms(t)) for t in texts]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = (sum(self.lengths) / len(self.lengths)) if self.docs else 1.0
        df = Counter(t for d in self.docs for t in d)
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        q = set(terms(query))
        out = []
        for d, length in zip(self.docs, self.lengths):
            norm = 1.2 * (0.25 + 0.75 * length / max(self.avg, 1e-9))
            out.append(sum(self.idf[t] * d[t] * 2.2 / (d[t] + norm) for t in q if t in d))
        return out

    def ranking(self, query: str) -> list[int]:
        scores = self.scores(query)
        return sorted(range(len(scores)), key=lambda i: -scores[i])
