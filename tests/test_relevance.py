"""Relevance (`recall.relevance`): how far the query's nearest fact stands above its typical one, in
units of the scope's own spread, so that a floor on it means the same under any embedder's scale.
Pure: no database (the typical similarity, SQL's `percentile_cont(0.5)`, is numpy's median here)."""

from __future__ import annotations

import numpy as np
import pytest

from memsoda_core.recall.relevance import Calibration, calibrate


def _unit(rows: np.ndarray) -> np.ndarray:
    unit: np.ndarray = rows / np.linalg.norm(rows, axis=-1, keepdims=True)
    return unit


def _lifted(rows: np.ndarray, c: float) -> np.ndarray:
    """Unit vectors with a constant coordinate appended: every cosine becomes (1 - c) * cos + c,
    the upward squeeze of a model whose unrelated texts already score high."""
    return np.hstack([rows * np.sqrt(1 - c), np.full((len(rows), 1), np.sqrt(c))])


def _relevance(facts: np.ndarray, query: np.ndarray) -> float:
    levels = calibrate(list(facts), "m")  # one vector each, as recall passes them
    assert levels is not None
    similarities = facts @ query
    return levels.relevance(float(similarities.max()), float(np.median(similarities)))


@pytest.mark.parametrize("c", [0.3, 0.6, 0.9])
def test_relevance_does_not_move_when_the_embedders_scale_does(c: float) -> None:
    rng = np.random.default_rng(7)
    facts = _unit(rng.normal(size=(40, 16)))
    queries = _unit(np.vstack([facts[3] + 0.3 * rng.normal(size=16), rng.normal(size=16)]))
    for query in queries:
        plain = _relevance(facts, query)
        lifted = _relevance(_lifted(facts, c), _lifted(query[None, :], c)[0])
        assert lifted == pytest.approx(plain, abs=1e-9)
    near, far = (_relevance(facts, query) for query in queries)
    assert near > far


def test_a_scope_too_small_or_all_alike_has_no_levels() -> None:
    assert calibrate(list(_unit(np.eye(4)[:2])), "m") is None
    assert calibrate(list(np.ones((5, 4))), "m") is None


def test_relevance_is_the_query_gap_in_units_of_the_memory_gap() -> None:
    levels = Calibration(unrelated=0.2, related=0.6, model="m")
    assert levels.relevance(0.7, 0.3) == pytest.approx(1.0)  # stands out as a fact beside its neighbour
    assert levels.relevance(0.5, 0.4) == pytest.approx(0.25)
