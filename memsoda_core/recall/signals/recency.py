"""The recency signal ("recent" in results): the most recent live facts. The whole result without
a query, the fallback when embedding failed, and with `RecallOptions.recent_candidates` a list fused
beside the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.recall.fragments import fragment
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.signals.spec import RecallPlan, RecallRequest, SignalSpec


def recent_cte(schema: str, access: ScopeAccess = SHARED, *, known: bool = False) -> sql.Composed:
    """The most recent live facts, latest first (ties by id)."""
    return fragment(
        """
    recent_hits AS (
        SELECT f.id AS fact_id, f.valid_at, row_number() OVER (ORDER BY f.valid_at DESC, f.id DESC) AS rank
        FROM {facts} f
        WHERE {where_f}
        ORDER BY f.valid_at DESC, f.id DESC
        LIMIT %(recent_limit)s)""",
        schema,
        access=access,
        known=known,
    )


def _ctes(schema: str, plan: RecallPlan, access: ScopeAccess) -> Sequence[sql.Composable]:
    return (recent_cte(schema, access, known=plan.known),)


def _params(inputs: RecallRequest) -> Mapping[str, Any]:
    # Without a query, the list is the result; beside a query, `recent_candidates` long, and as the
    # fallback for a failed embedding, as long as the vector list it stands for.
    options = inputs.options
    if inputs.query is None:
        return {"recent_limit": options.facts_in_context}
    return {"recent_limit": options.recent_candidates or options.vector_candidates}


def _runs(request: RecallRequest) -> bool:
    # the whole result without a vector; beside a query only when `recent_candidates` asks for it
    return request.embedding is None or (request.query is not None and bool(request.options.recent_candidates))


def _explain(hit: HitRow) -> str:
    return "most recent live fact"


SIGNAL = SignalSpec(
    name="recent",
    statement=0,
    runs=_runs,
    ctes=_ctes,
    params=_params,
    explain=_explain,
)
