"""Reciprocal Rank Fusion over per-signal ranked lists. Pure.

score(fact) = sum over lists of 1 / (k + rank), rank 1-based. Only positions count, never raw
scores: cosine, ts_rank and "touches an anchor" are not on comparable scales.
"""

from __future__ import annotations

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
    each list are at hand; with `limit`, only the best `limit` entries."""
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
    # arrive in: ties are then broken by the order's keys alone, which end in the (unique) id.
    extra = tiebreak or {}
    keyed: list[tuple[float, int, float, int, int, float]] = []
    for fact_id, by_signal in ranks.items():
        if len(by_signal) == 1:  # most facts: one list, and fsum of one term is that term
            (rank,) = by_signal.values()
            score, best_rank = 1.0 / (k + rank), rank
        else:
            score = math.fsum([1.0 / (k + r) for r in by_signal.values()])
            best_rank = min(by_signal.values())
        keyed.append((-score, best_rank, -extra.get(fact_id, 0.0), -fact_id, fact_id, score))
    keyed.sort()  # the keys as tuples, compared in C: no key function called per fact
    best = keyed if limit is None else keyed[: max(limit, 0)]
    return [(fact_id, score) for _, _, _, _, fact_id, score in best]
