"""What a signal is to the rest of recall: the value each signal module declares, the request it
derives its inputs from, and the plan (the statements' shape) that follows."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from psycopg import sql

from memsoda_core.layouts.access import ScopeAccess
from memsoda_core.recall.hits import HitRow
from memsoda_core.text import normalize_query
from memsoda_core.validation import Scope

if TYPE_CHECKING:  # options.py imports each signal's options: at run time a cycle
    from memsoda_core.options import RecallOptions


@dataclass(frozen=True, kw_only=True)
class RecallPlan:
    """The shape of a recall's statements: the signals that run (each decides from the request,
    `SignalSpec.runs`) and the few flags their CTEs read. Small and hashable: statements are
    memoized by (schema, plan, access)."""

    query: bool
    """There is query text."""
    embedding: bool
    """There is a query embedding."""
    hops: int = 2
    known: bool = False
    """A transaction time is given (`recall(known_at=...)`): every fragment's liveness test is the
    bitemporal one (`fragments.where`)."""
    signals: frozenset[str] = frozenset()
    """The signals that run (`SignalSpec.runs` of the request)."""
    exact: bool = False
    """The scope is searched exactly, in one statement (`statements.kept_hits_statement`): the
    signals read its live facts once (`signals.live`)."""
    within: bool = False
    """Only the facts %(within)s are searched (`RecallRequest.within`): every fragment's predicate
    says so (`fragments.where`), and they are searched exactly (`exact`), so that no index's
    approximate scan, filtered after it, cuts a signal's list short."""


Vector = Sequence[float] | np.ndarray[Any, Any]


@dataclass(frozen=True, kw_only=True)
class RecallRequest:
    """One recall as asked: what every signal derives its inputs from (whether it runs, what it
    needs embedded, its bound values), so a signal needing a new input reads it here itself."""

    scope: Scope
    query: str | None
    options: RecallOptions
    at: datetime
    """The time memory is read at (`as_of`, else now; moved to a window's end by `recall.asof`)."""
    asked_at: datetime | None = None
    """The time of the question, which its words are resolved against ("last week"); None: `at`."""
    known_at: datetime | None = None
    embedding: Vector | None = None
    """The query embedding, if any."""
    conversation: tuple[tuple[str, str], ...] = ()
    """The prior (role, content) turns, oldest first."""
    text_search_config: str = "english"
    vectors: Mapping[str, Vector] = field(default_factory=dict)
    """Signal name -> the embedding of the text it asked for (`SignalSpec.embeds`), when embedded."""
    within: tuple[int, ...] | None = None
    """The only facts the recall may rank (those of the items an item search's filter selects, at most
    `items.operations.MAX_WITHIN_FACTS`); None: the scope's every live fact."""

    @cached_property
    def normalized(self) -> str:
        """The query in `text.normalize_query` form ("" without a query)."""
        return normalize_query(self.query) if self.query else ""

    @property
    def question_time(self) -> datetime:
        return self.at if self.asked_at is None else self.asked_at


CteBuilder = Callable[[str, RecallPlan, ScopeAccess], Sequence[sql.Composable]]
"""(schema, plan, the scope's access) -> CTEs: `access` says which tables hold the scope's rows and
how the tenant is named in them (see `fragments.fragment`)."""

ParamsBuilder = Callable[[RecallRequest], Mapping[str, Any]]
"""The request -> bound values, each named after the option it comes from (`anchor.max_facts` is
`%(anchor_max_facts)s`)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class SharedCtes:
    """CTEs several signals read (added once to a statement that holds any of them), with their
    parameters."""

    name: str
    ctes: CteBuilder
    params: ParamsBuilder


@dataclass(frozen=True, kw_only=True, eq=False)
class SignalSpec:
    """One signal: everything statement assembly, fusion and explanations need of it. Compared and
    hashed by identity (its fields are functions): a registry, which keys the memoized statements,
    hashes as a tuple of ids."""

    name: str
    """As results show it: `SignalHit.signal`, the keys of `ScoredFact.ranks`."""
    statement: int
    """Signals with the same number share one statement; the statements run at once."""
    runs: Callable[[RecallRequest], bool]
    """Whether it runs for the request (its `embeds` vector, if any, in `RecallRequest.vectors`)."""
    ctes: CteBuilder
    """Its CTEs, the last one `<name>_hits` with fact_id, rank, valid_at and what `details` reads."""
    details: tuple[tuple[str, str], ...] = ()
    """(HitRow field, SQL expression over its hits CTE) for the detail columns it fills."""
    params: ParamsBuilder
    explain: Callable[[HitRow], str]
    """Why it picked a fact, in words a person can check."""
    requires: tuple[SharedCtes, ...] = ()
    embeds: Callable[[RecallRequest], str | None] = lambda request: None
    """The text it needs embedded, if any: the operation embeds it (the runner's `embed_query`)
    into `RecallRequest.vectors[name]`, before `runs` and `params` read the request."""

    @property
    def hits(self) -> str:
        """The name of its last CTE, one row per hit."""
        return f"{self.name}_hits"


Group = TypeVar("Group")


def signal(spec: SignalSpec, group: Callable[[], Group]) -> Group:
    """A field of the registry (`signals.SignalOptions`): the signal `spec` at this place, its knobs the
    options group `group` (a frozen dataclass whose `group` is the field's name), made with its
    defaults. Typed as the group, so `options.anchor.hops` is an int to mypy."""
    return field(default_factory=group, metadata={"signal": spec})
