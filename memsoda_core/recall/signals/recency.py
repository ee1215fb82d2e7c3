"""The recency signal ("recent" in results): the most recent live facts. The whole result without
a query, the fallback when embedding failed, and with `recent.candidates` (`RecentOptions`) a list fused
beside the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.option_checks import check_between, check_types
from memsoda_core.recall.fragments import fragment
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.signals.live import once, reads_live
from memsoda_core.recall.signals.spec import RecallPlan, RecallRequest, SignalSpec


def recent_cte(
    schema: str, access: ScopeAccess = SHARED, *, known: bool = False, exact: bool = False, within: bool = False
) -> sql.Composed:
    """The most recent live facts (with `within`, of %(within)s), latest first (ties by id); with
    `exact` (a scope searched exactly), planned apart (`live.once`)."""
    return fragment(
        """
    recent_hits AS{once} (
        SELECT f.id AS fact_id, f.valid_at, row_number() OVER (ORDER BY f.valid_at DESC, f.id DESC) AS rank
        FROM {facts} f
        WHERE {where_f}
        ORDER BY f.valid_at DESC, f.id DESC
        LIMIT %(recent_limit)s)""",
        schema,
        access=access,
        known=known,
        within=within,
        once=once(exact),
    )


def _ctes(schema: str, plan: RecallPlan, access: ScopeAccess) -> Sequence[sql.Composable]:
    return (recent_cte(schema, access, known=plan.known, exact=reads_live(plan), within=plan.within),)


@dataclass(frozen=True, kw_only=True)
class RecentOptions:
    """The recency signal's knobs (`RecallOptions.recent`)."""

    group: ClassVar[str] = "recent"
    candidates: int | None = None
    """With a query: fuse this many most recent live facts as a list of their own; 0 turns it off.
    For memories whose later notes restate and update earlier ones, where the latest notes are what
    a message is about. A list that ignores the query still votes in RRF: where time says nothing
    about relevance it buries what only the vector list finds (bench/RESULTS.md, section 6, "A
    recency list, ..."). None (the default): the memory chooses, 0 or 50 (`recall.adaptive`)."""

    def __post_init__(self) -> None:
        check_types(self, self.group)
        check_between("recent.candidates", self.candidates, 0, 1000, " (0: off)")


def _params(inputs: RecallRequest) -> Mapping[str, Any]:
    # Without a query, the list is the result; beside a query, `recent.candidates` long, and as the
    # fallback for a failed embedding, as long as the vector list it stands for.
    options = inputs.options
    if inputs.query is None:
        return {"recent_limit": options.facts_in_context}
    return {"recent_limit": options.recent.candidates or options.vector.candidates}


def _runs(request: RecallRequest) -> bool:
    # the whole result without a vector; beside a query only when `recent.candidates` asks for it
    return request.embedding is None or (request.query is not None and bool(request.options.recent.candidates))


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
