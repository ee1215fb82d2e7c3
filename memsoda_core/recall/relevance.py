"""How relevant memory is to a query, on a scale the embedder cannot move (`RecallOptions.min_relevance`).

A raw cosine means nothing across embedders: two unrelated sentences score about 0.05 under one
model and 0.75 under another. So the query's similarity to its nearest fact is placed between
two levels the scope's own facts show under the same embedder: how alike two of its facts are
(`unrelated`, the median over pairs of its latest facts) and how alike a fact and its nearest
neighbour among them are (`related`, the median over those facts). A query's relevance is
`(similarity - unrelated) / (related - unrelated)`: 0 at a typical pair of the memory's facts, 1
at a typical fact's nearest neighbour. Both levels move with the embedder's scale as the query's
similarity does, so a floor on relevance means the same under any model (an affine change of the
similarities leaves it unchanged exactly). The levels are read from the scope's latest
`SAMPLE_FACTS` facts, live or not (one index range scan), and remembered per scope for
`CALIBRATION_TTL_S`; a write through the same store forgets them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from psycopg import sql

from memsoda_core.recall.remembered import ScopeMemo
from memsoda_core.recall.scope_stats import SAMPLE_FACTS
from memsoda_core.runner.steps import Operation, Planning, execute_as
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.tenant_index import tenant_predicate
from memsoda_core.validation import Scope

CALIBRATION_TTL_S = 60.0
"""How long a scope's levels are trusted: a few more facts hardly move two medians over 200, and a
write through this store forgets them at once."""

CALIBRATION_KEPT = 4096

MIN_SAMPLE = 3
"""Fewer facts than this give no pair whose nearest neighbour differs from the pair itself: no
levels, and the floor judges nothing."""


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The two levels of a scope's similarities that relevance is measured between."""

    unrelated: float
    """The median similarity of two distinct facts among the scope's latest."""
    related: float
    """The median, over those facts, of the similarity to their nearest other one."""
    sampled: int
    """How many facts the levels were read from."""
    model: str
    """The embedder whose vectors they come from: another model's levels are read again."""

    def relevance(self, similarity: float) -> float:
        """Where `similarity` falls: 0 at `unrelated`, 1 at `related` (beyond either end too)."""
        return (similarity - self.unrelated) / (self.related - self.unrelated)


@dataclass(frozen=True, kw_only=True)
class VectorRow:
    """One of the scope's latest facts' embeddings, by column name."""

    embedding: Any


def calibrate(vectors: np.ndarray[Any, Any], model: str) -> Calibration | None:
    """The levels of the rows of `vectors` (one fact each, embedded by `model`), or None when they
    cannot tell a related pair from an unrelated one (fewer than `MIN_SAMPLE` facts, or every pair
    alike)."""
    count = len(vectors)
    if count < MIN_SAMPLE:
        return None
    unit = vectors.astype(np.float64)
    unit /= np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), np.finfo(np.float64).tiny)
    similarities = unit @ unit.T
    pairs = similarities[np.triu_indices(count, k=1)]
    np.fill_diagonal(similarities, -np.inf)
    unrelated = float(np.median(pairs))
    related = float(np.median(similarities.max(axis=1)))
    if not related > unrelated:
        return None
    return Calibration(unrelated=unrelated, related=related, sampled=count, model=model)


def latest_vectors_statement(schema: str) -> sql.Composed:
    """The embeddings of scope %(dataset)s / %(project)s's latest %(sample_facts)s facts, live or not
    (a backward scan of the primary key, like `scope_stats.stats_statement`)."""
    return sql.SQL(
        "SELECT f.embedding FROM {s}.facts f WHERE {tenant} ORDER BY f.id DESC LIMIT %(sample_facts)s"
    ).format(s=sql.Identifier(schema), tenant=tenant_predicate("f"))


class CalibrationCache(ScopeMemo[Calibration]):
    """scope -> its `Calibration`, for `CALIBRATION_TTL_S` (a scope without one is read again: it
    has a few facts at most)."""

    def __init__(self, ttl_s: float = CALIBRATION_TTL_S, size: int = CALIBRATION_KEPT) -> None:
        super().__init__(ttl_s, size)


def read_calibration(info: StoreInfo, scope: Scope) -> Operation[Calibration | None]:
    """One read of `scope`'s latest embeddings, calibrated."""
    rows = yield from execute_as(
        VectorRow,
        latest_vectors_statement(info.schema),
        {"dataset": scope.dataset, "project": scope.project, "sample_facts": SAMPLE_FACTS},
        Planning.FRESH,
    )
    if len(rows) < MIN_SAMPLE:
        return None
    return calibrate(np.stack([np.asarray(row.embedding, dtype=np.float32) for row in rows]), info.model)


def calibration(info: StoreInfo, scope: Scope, cache: CalibrationCache | None) -> Operation[Calibration | None]:
    """`scope`'s levels: remembered in `cache` (for the store's current model), or read."""
    known = cache.get(scope) if cache is not None else None
    if known is not None and known.model == info.model:
        return known
    found = yield from read_calibration(info, scope)
    if cache is not None and found is not None:
        cache.put(scope, found)
    return found


def nearest_relevance(similarities: Iterable[float], levels: Calibration | None) -> float | None:
    """The relevance of the most similar of the vector signal's facts; None when the scope has no
    levels or the signal found nothing (nothing is judged then)."""
    best = max(similarities, default=None)
    return None if best is None or levels is None else round(levels.relevance(best), 4)
