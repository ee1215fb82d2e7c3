"""Ranking metrics over the top `k` of a ranked list with binary relevance (pure)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

K = 8


def recall_at(ranked: Sequence[str], gold: Collection[str], k: int = K) -> float:
    """Share of the gold facts found in the top k."""
    return len(set(ranked[:k]) & set(gold)) / len(gold) if gold else 0.0


def mrr_at(ranked: Sequence[str], gold: Collection[str], k: int = K) -> float:
    """1 / rank of the first gold fact within the top k, else 0."""
    for position, key in enumerate(ranked[:k], start=1):
        if key in gold:
            return 1.0 / position
    return 0.0


def ndcg_at(ranked: Sequence[str], gold: Collection[str], k: int = K) -> float:
    """Normalized discounted cumulative gain at k, every gold fact with gain 1."""
    dcg = sum(1.0 / math.log2(position + 1) for position, key in enumerate(ranked[:k], start=1) if key in gold)
    ideal = sum(1.0 / math.log2(position + 1) for position in range(1, min(len(gold), k) + 1))
    return dcg / ideal if ideal else 0.0


def stale_at(ranked: Sequence[str], stale: Collection[str], k: int = K) -> float:
    """1 when an invalidated fact made the top k, else 0."""
    return 1.0 if set(ranked[:k]) & set(stale) else 0.0
