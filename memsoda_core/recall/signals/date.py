"""The date signal: when the question names a day, month or year ("on 7 May 2023", "last week"),
the facts that held in that window, by similarity to the query.

The window comes from `recall.dates.question_window`, resolved against the time of the question
(`as_of`, else now). A fact is listed when its validity overlaps the window and it is stored as
valid by the question's time, and either it began in the window (an event of that time) or it
has ended since (what held then and no longer does, which the other signals leave out as not live
now). A fact that began earlier and still holds is left to the other signals: listing it would
only repeat the vector list. Without a window the signal does not run and its statement is not
sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.option_checks import check_between, check_types
from memsoda_core.recall.dates import Window, question_window
from memsoda_core.recall.fragments import fragment, within_facts
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.signals.spec import RecallPlan, RecallRequest, SignalSpec

OPEN_START = datetime(1, 1, 2, tzinfo=UTC)
"""The bound start of a window open at the start ("before 2020"): before any stored date."""


def date_cte(schema: str, plan: RecallPlan, access: ScopeAccess = SHARED) -> sql.Composed:
    """Facts that held in [%(window_start)s, %(window_end)s) (see the module docstring), nearest
    the query embedding first (most recent first without one); ties by recency, then id. The two
    branches are ranges of `facts_recent` (began in the window, still holding) and `facts_ended`
    (ended since its start), so a window holding few facts is read by index, not by a scan. With
    `plan.within`, of the facts %(within)s only (its predicate is its own, not `fragments.where`)."""
    order = "f.embedding <=> %(qvec)s" if plan.embedding else "NULL::float8"
    learned = " AND f.created_at <= %(known_at)s" if plan.known else ""  # what memory knew by then
    among = within_facts("f", plan.within)
    return fragment(
        """
    date_hits AS (
        SELECT id AS fact_id, distance, valid_at, valid_at >= %(window_start)s AS began,
               row_number() OVER (ORDER BY distance, valid_at DESC, id DESC) AS rank
        FROM (SELECT f.id, {order} AS distance, f.valid_at
              FROM {facts} f
              WHERE {scope_f} AND f.confidence >= %(min_confidence)s AND f.valid_at <= %(at)s
                AND (f.invalid_at IS NULL AND f.valid_at >= %(window_start)s AND f.valid_at < %(window_end)s
                     OR f.invalid_at > %(window_start)s AND f.valid_at < %(window_end)s){learned}{among}
              ORDER BY distance, f.valid_at DESC, f.id DESC
              LIMIT %(date_candidates)s) d)""",
        schema,
        access=access,
        order=sql.SQL(order),
        learned=sql.SQL(learned),
        among=among,
    )


def _ctes(schema: str, plan: RecallPlan, access: ScopeAccess) -> Sequence[sql.Composable]:
    return (date_cte(schema, plan, access),)


@dataclass(frozen=True, kw_only=True)
class DateOptions:
    """The date signal's knobs (`RecallOptions.date`)."""

    group: ClassVar[str] = "date"
    candidates: int = 50
    """Length of the date signal's list (facts that held in the window a question names); 0 turns
    the signal off."""

    def __post_init__(self) -> None:
        check_types(self, self.group)
        check_between("date.candidates", self.candidates, 0, 1000, " (0: off)")


def asked_window(request: RecallRequest) -> Window | None:
    """The window the question names, resolved against the time it is asked; None when it names
    none or `date.candidates` is 0 (the signal is off)."""
    return question_window(request.query, request.question_time) if request.options.date.candidates else None


def _params(inputs: RecallRequest) -> Mapping[str, Any]:
    window = asked_window(inputs)
    return {
        "date_candidates": inputs.options.date.candidates or 1,
        "window_start": OPEN_START if window is None or window.start is None else window.start,
        "window_end": OPEN_START if window is None else window.end,
        "window_words": "" if window is None else window.describe(),
    }


def _explain(hit: HitRow) -> str:
    held = "began" if hit.began else "held, since ended,"
    similarity = "" if hit.similarity is None else f"; cosine similarity {float(hit.similarity):.3f} to the query"
    return f"{held} in the window the question names: {hit.period}{similarity}"


SIGNAL = SignalSpec(
    name="date",
    statement=2,
    runs=lambda request: request.query is not None and asked_window(request) is not None,
    ctes=_ctes,
    details=(
        ("similarity", "1 - distance"),
        ("began", "began"),
        ("period", "%(window_words)s::text"),
    ),
    params=_params,
    explain=_explain,
)
