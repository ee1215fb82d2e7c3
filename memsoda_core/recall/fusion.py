"""Reciprocal Rank Fusion over per-signal ranked lists. Pure.

score(fact) = sum over lists of 1 / (k + rank), rank 1-based. Only positions count, never raw
scores: cosine, ts_rank and "touches an anchor" are not on comparable scales.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Fused:
    """One fused entry: the fact id, its RRF score and its rank in each list that held it."""

    fact_id: int
    score: float
    ranks: Mapping[str, int]


def rrf(lists: Mapping[str, Sequence[int]], *, k: int = 60, tiebreak: Mapping[int, float] | None = None) -> list[Fused]:
    """Fuse ranked lists of fact ids (best first; position 1 is rank 1) by RRF with constant `k`.

    A fact appearing in several lists sums its contributions, so agreement beats a single top
    rank. Ties are broken by the best single rank, then by `tiebreak` (higher first, e.g. a
    timestamp), then by the larger id, so the order is total and repeatable.
    """
    ranks: dict[int, dict[str, int]] = {}
    for signal, ids in lists.items():
        for position, fact_id in enumerate(ids, start=1):
            ranks.setdefault(fact_id, {}).setdefault(signal, position)  # keep a list's best position
    return rrf_ranks(ranks, k=k, tiebreak=tiebreak)


def rrf_ranks(
    ranks: Mapping[int, Mapping[str, int]],
    *,
    k: int = 60,
    tiebreak: Mapping[int, float] | None = None,
    limit: int | None = None,
) -> list[Fused]:
    """`rrf` over known ranks (fact id -> signal -> 1-based rank), for when only some members of
    each list are at hand; with `limit`, only the best `limit` entries (a partial sort)."""
    return [
        Fused(fact_id=i, score=score, ranks=dict(ranks[i]))
        for i, score in rrf_scores(ranks, k=k, tiebreak=tiebreak, limit=limit)
    ]


def rrf_scores(
    ranks: Mapping[int, Mapping[str, int]],
    *,
    k: int = 60,
    tiebreak: Mapping[int, float] | None = None,
    limit: int | None = None,
) -> list[tuple[int, float]]:
    """`rrf_ranks`' (fact id, score) pairs alone, in its order: what a recall keeps (its hits say
    the ranks)."""
    # fsum is exactly rounded, so equal rank sets give equal scores whatever the order the hits
    # arrive in: ties are then broken by `order` alone.
    scores: dict[int, float] = {}
    best_rank: dict[int, int] = {}
    for fact_id, by_signal in ranks.items():
        if len(by_signal) == 1:  # most facts: one list, and fsum of one term is that term
            (rank,) = by_signal.values()
            scores[fact_id] = 1.0 / (k + rank)
            best_rank[fact_id] = rank
        else:
            scores[fact_id] = math.fsum([1.0 / (k + r) for r in by_signal.values()])
            best_rank[fact_id] = min(by_signal.values())
    extra = tiebreak or {}

    def order(fact_id: int) -> tuple[float, int, float, int]:
        return (-scores[fact_id], best_rank[fact_id], -extra.get(fact_id, 0.0), -fact_id)

    best = sorted(scores, key=order) if limit is None else heapq.nsmallest(limit, scores, key=order)
    return [(i, scores[i]) for i in best]
