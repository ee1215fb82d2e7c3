"""How relevant memory is to a query, on a scale the embedder cannot move (`RecallOptions.min_relevance`).

A raw cosine means nothing across embedders: two unrelated sentences score about 0.05 under one
model and 0.8 under another, and a model may place questions apart from statements. So relevance
compares two gaps, each measured under the same embedder on the scope's own latest
`SAMPLE_FACTS` facts:

- the query's: how far its nearest fact stands above its *typical* fact (its median similarity to
  the sample), which cancels both the model's scale and where it places questions;
- the memory's (`Calibration`): how far a fact's nearest neighbour among the sample stands above
  two typical facts of it (medians), the unit.

`relevance = (nearest - typical) / (related - unrelated)`: 1 when the query stands out from the
memory as a stored fact stands out beside its nearest neighbour, near 0 when nothing stands out.
Any affine change of the similarities leaves it unchanged exactly. The memory's levels are one read
of the sample's embeddings, remembered per scope and model for `CALIBRATION_TTL_S` (a write through
the same store forgets them); the query's typical similarity is one small statement per recall,
sent only when the floor is set."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from psycopg import sql

from memsoda_core.recall.remembered import ScopeMemo, ticket
from memsoda_core.recall.scope_stats import SAMPLE_FACTS, latest_facts_query
from memsoda_core.runner.steps import Operation, Planning, execute_as
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope

CALIBRATION_TTL_S = 60.0
"""How long a scope's levels are trusted: a few more facts hardly move two medians over 200, and a
write through this store forgets them at once."""

CALIBRATION_KEPT = 4096
"""How many scopes' levels are remembered at most (the least recently used go first)."""

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
    model: str
    """The embedder whose vectors they come from: another model's levels are read again."""

    def relevance(self, nearest: float, typical: float) -> float:
        """How far the query's `nearest` similarity stands above its `typical` one, in units of
        `related - unrelated`."""
        return (nearest - typical) / (self.related - self.unrelated)


@dataclass(frozen=True, kw_only=True)
class TypicalRow:
    """The query's median similarity to the sample, by column name (None: no facts)."""

    typical: float | None


@dataclass(frozen=True, kw_only=True)
class VectorRow:
    """One of the scope's latest facts' embeddings, by column name."""

    embedding: Any


def calibrate(embeddings: Sequence[Any], model: str) -> Calibration | None:
    """The levels of `embeddings` (one fact each, embedded by `model`), or None when they cannot
    tell a related pair from an unrelated one (fewer than `MIN_SAMPLE` facts, or every pair alike)."""
    count = len(embeddings)
    if count < MIN_SAMPLE:
        return None
    unit = np.stack([np.asarray(embedding, dtype=np.float64) for embedding in embeddings])
    unit /= np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), np.finfo(np.float64).tiny)
    similarities = unit @ unit.T
    pairs = similarities[np.triu_indices(count, k=1)]
    np.fill_diagonal(similarities, -np.inf)
    unrelated = float(np.median(pairs))
    related = float(np.median(similarities.max(axis=1)))
    if not related > unrelated:
        return None
    return Calibration(unrelated=unrelated, related=related, model=model)


def latest_vectors_statement(schema: str) -> sql.Composed:
    """The embeddings of scope %(dataset)s / %(project)s's latest %(sample_facts)s facts
    (`scope_stats.latest_facts_query`)."""
    return latest_facts_query(schema, sql.SQL("f.embedding"))


def typical_statement(schema: str) -> sql.Composed:
    """The median similarity of the query embedding %(qvec)s to the sample `latest_vectors_statement`
    reads."""
    return sql.SQL(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY 1 - (f.embedding <=> %(qvec)s)) AS typical "
        "FROM ({latest}) f"
    ).format(latest=latest_vectors_statement(schema))


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
    return calibrate([row.embedding for row in rows], info.model)


def calibration(info: StoreInfo, scope: Scope, cache: CalibrationCache | None) -> Operation[Calibration | None]:
    """`scope`'s levels: remembered in `cache` (for the store's current model), or read."""
    known = cache.get(scope) if cache is not None else None
    if known is not None and known.model == info.model:
        return known
    read_at = ticket()
    found = yield from read_calibration(info, scope)
    if cache is not None and found is not None:
        cache.put(scope, found, read_at)
    return found


def query_relevance(
    info: StoreInfo, scope: Scope, params: Mapping[str, Any], nearest: float | None, cache: CalibrationCache | None
) -> Operation[float | None]:
    """The relevance of the query (embedding `params["qvec"]`) whose nearest fact has similarity
    `nearest`; None when nothing is judged (no nearest fact, or a scope without levels)."""
    if nearest is None:
        return None
    levels = yield from calibration(info, scope, cache)
    if levels is None:
        return None
    rows = yield from execute_as(
        TypicalRow,
        typical_statement(info.schema),
        {"dataset": scope.dataset, "project": scope.project, "sample_facts": SAMPLE_FACTS, "qvec": params["qvec"]},
    )
    typical = rows[0].typical if rows else None
    return None if typical is None else round(levels.relevance(nearest, typical), 4)
