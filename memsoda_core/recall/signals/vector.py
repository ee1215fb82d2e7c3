"""The vector signal: the facts nearest the query embedding."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.option_checks import check_between, check_types
from memsoda_core.recall.fragments import fragment
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.signals.live import LIVE_FACTS, once, reads_live
from memsoda_core.recall.signals.spec import RecallPlan, RecallRequest, SignalSpec

NEAREST = """
    {name}_hits AS{once} (
        SELECT id AS fact_id, distance, valid_at,
               row_number() OVER (ORDER BY distance, id DESC) AS rank
        FROM (SELECT f.id, f.embedding <=> {vector} AS distance, f.valid_at
              FROM {facts} f
              WHERE {index_where_f}
              ORDER BY f.embedding <=> {vector}
              LIMIT {limit}) v)"""


def nearest_cte(
    schema: str,
    name: str,
    vector: str,
    limit: str,
    access: ScopeAccess = SHARED,
    *,
    known: bool = False,
    exact: bool = False,
    within: bool = False,
) -> sql.Composed:
    """`<name>_hits`: cosine kNN of fact embeddings to the bound vector %(<vector>)s, the nearest
    %(<limit>)s (`name` is memsoda's own constant). The inner ORDER BY can use HNSW (with
    iterative scans the order is relaxed); the outer row_number re-sorts exactly and breaks ties
    by id. With `exact` (a scope searched exactly), planned apart (`live.once`); with `within`,
    of the facts %(within)s only (`fragments.where`)."""
    return fragment(
        NEAREST,
        schema,
        access=access,
        known=known,
        within=within,
        name=sql.SQL(name),
        vector=sql.Placeholder(vector),
        limit=sql.Placeholder(limit),
        once=once(exact),
    )


def vector_cte(schema: str, access: ScopeAccess = SHARED, *, known: bool = False, within: bool = False) -> sql.Composed:
    """The facts nearest the query embedding %(qvec)s."""
    return nearest_cte(schema, "vector", "qvec", "vector_candidates", access, known=known, within=within)


LIVE_NEAREST = """
    vector_hits AS MATERIALIZED (
        SELECT id AS fact_id, distance, valid_at,
               row_number() OVER (ORDER BY distance, id DESC) AS rank
        FROM (SELECT l.id, l.distance, l.valid_at
              FROM live l
              ORDER BY l.distance, l.id DESC
              LIMIT %(vector_candidates)s) v)"""
"""`vector_cte` over the scope's live facts, their distances computed once (`signals.live`), planned
apart (`live.once`). With no index to serve the order, its first %(vector_candidates)s are taken in
the list's own order (ties by id), so the ranking reads them presorted: one sort, where a second
one re-sorted the kept rows (and which of the facts tied at the cut was kept was left to the
sort)."""


def _ctes(schema: str, plan: RecallPlan, access: ScopeAccess) -> Sequence[sql.Composable]:
    if reads_live(plan):
        return (sql.SQL(LIVE_NEAREST),)
    return (vector_cte(schema, access, known=plan.known, within=plan.within),)


@dataclass(frozen=True, kw_only=True)
class VectorOptions:
    """The vector signal's knobs (`RecallOptions.vector`)."""

    group: ClassVar[str] = "vector"
    candidates: int = 50
    """Length of the vector signal's list."""

    def __post_init__(self) -> None:
        check_types(self, self.group)
        check_between("vector.candidates", self.candidates, 1, 1000)


def _params(inputs: RecallRequest) -> Mapping[str, Any]:
    return {"vector_candidates": inputs.options.vector.candidates}


def _explain(hit: HitRow) -> str:
    return f"cosine similarity {round(float(hit.similarity or 0), 4):.3f} to the query"


SIGNAL = SignalSpec(
    name="vector",
    statement=0,
    runs=lambda request: request.embedding is not None,
    ctes=_ctes,
    details=(("similarity", "1 - distance"),),
    params=_params,
    explain=_explain,
    requires=(LIVE_FACTS,),
)
