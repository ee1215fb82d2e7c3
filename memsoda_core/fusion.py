"""Reciprocal Rank Fusion over per-signal ranked lists. Pure.

score(fact) = sum over lists of 1 / (k + rank), rank 1-based. Only positions count, never raw
scores: cosine, ts_rank and "touches an anchor" are not on comparable scales.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Fused:
    """One fused entry: the fact id, its RRF score and its rank in each list that held it."""

    fact_id: int
    score: float
    ranks: Mapping[str, int]


def rrf(lists: Mapping[str, Sequence[int]], *, k: int = 60, tiebreak: Mapping[int, float] | None = None) -> list[Fused]:
    """Fuse ranked lists of fact ids (best first) by RRF with constant `k`.

    A fact appearing in several lists sums its contributions, so agreement beats a single top
    rank. Ties are broken by the best single rank, then by `tiebreak` (higher first, e.g. a
    timestamp), then by the larger id, so the order is total and repeatable.
    """
    scores: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    for signal, ids in lists.items():
        for position, fact_id in enumerate(ids, start=1):
            if signal in ranks.get(fact_id, {}):
                continue  # a list holds each fact once; keep its first (best) position
            scores[fact_id] = scores.get(fact_id, 0.0) + 1.0 / (k + position)
            ranks.setdefault(fact_id, {})[signal] = position
    extra = tiebreak or {}

    def order(fact_id: int) -> tuple[float, int, float, int]:
        return (-scores[fact_id], min(ranks[fact_id].values()), -extra.get(fact_id, 0.0), -fact_id)

    return [Fused(fact_id=i, score=scores[i], ranks=ranks[i]) for i in sorted(scores, key=order)]
