"""The embedder protocol. It uses LangChain's method names, so many existing objects fit it."""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memsoda_core.errors import EmbeddingError


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns text into vectors of one fixed model and dimension."""

    @property
    def model(self) -> str:
        """A stable identifier of the model, recorded in the store."""
        ...

    @property
    def dimensions(self) -> int:
        """Length of every vector."""
        ...

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query."""
        ...

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async `embed_documents`."""
        ...

    async def aembed_query(self, text: str) -> list[float]:
        """Async `embed_query`."""
        ...


Vector = np.ndarray[Any, np.dtype[np.float32]]


def check_vectors(
    vectors: object, *, count: int, dimensions: int, source: str = "embedder returned", items: str = "texts"
) -> list[Vector]:
    """Vectors as returned by an embedder for `count` `items` (or given by the caller: `source`
    starts the error messages), checked: the right count, the right length, all finite; as
    float32 arrays (what the store holds, and what pgvector sends in binary).

    Raises EmbeddingError naming what is wrong, so a bad embedder never writes a bad row."""
    if isinstance(vectors, str | bytes) or not hasattr(vectors, "__iter__"):
        raise EmbeddingError(f"{source} {type(vectors).__name__}, expected a list of vectors")
    rows = list(vectors)
    if len(rows) != count:
        raise EmbeddingError(f"{source} {len(rows)} vectors for {count} {items}")
    checked: list[Vector] = []
    for row in rows:
        with np.errstate(over="ignore"):  # beyond float32 a value becomes inf (refused below), a sum overflows
            values = _flat_vector(row, source)
            if len(values) != dimensions:
                raise EmbeddingError(f"{source} a vector of dimension {len(values)}, expected {dimensions}")
            squares = float(values @ values)
        # A finite, non-zero vector has a finite, positive sum of squares, found in one pass. Else (or
        # when that sum overflows or underflows float32) the two checks below say which it is.
        if not 0.0 < squares < math.inf:
            if not np.isfinite(values).all():
                raise EmbeddingError(f"{source} a vector with NaN or infinite values")
            if not values.any():
                raise EmbeddingError(f"{source} an all-zero vector, which has no cosine direction")
        checked.append(values)
    return checked


def _flat_vector(row: object, source: str) -> Vector:
    """`row` as a float32 array of one dimension (EmbeddingError if it is no such thing)."""
    try:
        if isinstance(row, str | bytes):
            raise TypeError("a vector cannot be a string")
        values = np.asarray(row, dtype=np.float32)
        if values.ndim != 1:
            raise TypeError(f"expected a flat sequence of numbers, got {values.ndim} dimensions")
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an int beyond any float
        raise EmbeddingError(f"{source} something that is not a vector of numbers: {exc}") from None
    return values
