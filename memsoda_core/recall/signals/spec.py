"""What a signal is to the rest of recall: the value each signal module declares, and the plan it
reads to decide whether it runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from memsoda_core.layouts.access import ScopeAccess
from memsoda_core.options import RecallOptions
from memsoda_core.recall.dates import Window
from memsoda_core.recall.hits import HitRow


@dataclass(frozen=True, kw_only=True)
class RecallPlan:
    """What a recall searches with; each signal decides from it whether it runs (`SignalSpec.runs`)."""

    query: bool
    """There is query text."""
    embedding: bool
    """There is a query embedding."""
    hops: int = 2
    known: bool = False
    """A transaction time is given (`recall(known_at=...)`): every fragment's liveness test is the
    bitemporal one (`fragments.where`)."""
    dated: bool = False
    """The question names a time window (`recall.dates.question_window`)."""
    conversation: bool = False
    """There is an embedding of the conversation's recent turns."""
    default_partitions: bool = False
    """Unread: where the statements read is `layouts.access.ScopeAccess.default_partitions`. Kept
    until `result.plan_for` drops its parameter (TODO(merge): remove both)."""
    recent: bool = False
    """With a query: the most recent live facts are fused as a list too (`RecallOptions.recent_candidates`)."""


@dataclass(frozen=True, kw_only=True)
class SignalInputs:
    """What the statement parameters are built from."""

    query: str | None
    normalized: str
    """The query in `text.normalize_query` form ("" without a query)."""
    options: RecallOptions
    text_search_config: str
    window: Window | None = None
    """The time window the question names, if any."""


CteBuilder = Callable[[str, RecallPlan, ScopeAccess], Sequence[sql.Composable]]
"""(schema, plan, the scope's access) -> CTEs: `access` says which tables hold the scope's rows and
how the tenant is named in them (see `fragments.fragment`)."""

ParamsBuilder = Callable[[SignalInputs], Mapping[str, Any]]
"""Inputs -> bound values, each named like the `RecallOptions` field it comes from."""


@dataclass(frozen=True, kw_only=True)
class SharedCtes:
    """CTEs several signals read (added once to a statement that holds any of them), with their
    parameters."""

    name: str
    ctes: CteBuilder
    params: ParamsBuilder


@dataclass(frozen=True, kw_only=True)
class SignalSpec:
    """One signal: everything statement assembly, fusion and explanations need of it."""

    name: str
    """As results show it: `SignalHit.signal`, the keys of `ScoredFact.ranks`."""
    statement: int
    """Signals with the same number share one statement; the statements run at once."""
    runs: Callable[[RecallPlan], bool]
    ctes: CteBuilder
    """Its CTEs, the last one `<name>_hits` with fact_id, rank, valid_at and what `details` reads."""
    details: tuple[tuple[str, str], ...] = ()
    """(HitRow field, SQL expression over its hits CTE) for the detail columns it fills."""
    params: ParamsBuilder
    explain: Callable[[HitRow], str]
    """Why it picked a fact, in words a person can check."""
    requires: tuple[SharedCtes, ...] = ()

    @property
    def hits(self) -> str:
        """The name of its last CTE, one row per hit."""
        return f"{self.name}_hits"
