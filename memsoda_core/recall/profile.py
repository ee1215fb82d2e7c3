"""The standing profile: a block for the system prompt that stays byte-identical across calls until
one of its facts changes, so a provider's prompt cache stays warm (the per-message recall goes after
the conversation, with the profile's facts excluded: `Memory.recall(exclude=...)`).

The rule, stated once (`profile_statement`): the live facts (valid now, at or above the confidence
floor) whose subject is the profile's subject (default "user", `remember`'s `user`), ranked by

1. single-valued relations first (a predicate registered with `set_single_valued`: one value at a
   time, like where the user lives),
2. then `times_seen`, most repeated first,
3. then confidence, highest first,
4. then the older fact first (smaller id), so a new fact never pushes out one of equal rank,

cut at `max_facts`. Nothing about the current message takes part. The chosen facts are rendered in id
order (a rise in rank that keeps the same set changes nothing) with the line format of the recall
block (`fact_text.fact_text`). The version is a hash of the text: it changes iff the text does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql

from memsoda_core.fact_text import fact_text
from memsoda_core.layouts import layout_of
from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.models import Fact
from memsoda_core.recall.fragments import where
from memsoda_core.recall.render import FACTS_FORMAT
from memsoda_core.runner.steps import Operation, execute_as
from memsoda_core.store.fact_columns import fact_columns, fact_from
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.statements import tenant_statement
from memsoda_core.validation import Scope

PROFILE_HEADER = "Standing facts about the user (profile)."
PROFILE_HEADING = "# PROFILE  " + FACTS_FORMAT
DEFAULT_MAX_FACTS = 20
MAX_FACTS = 200
"""The most facts a profile holds: it is meant to be a short standing block."""


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A standing profile: `text` for the system prompt ("" when there is nothing to show), the
    chosen facts in rendered (id) order, and `version`, a hash of `text`."""

    text: str
    facts: tuple[Fact, ...]
    version: str

    @property
    def fact_ids(self) -> tuple[int, ...]:
        """The chosen facts' ids: pass them as `recall(exclude=...)`."""
        return tuple(fact.id for fact in self.facts)


class ProfileRow:
    """A row of `profile_statement`, read by column name."""

    __slots__ = ("fact", "single_valued")

    def __init__(self, *, single_valued: bool, **columns: Any) -> None:
        self.fact: Fact = fact_from(columns)
        self.single_valued = bool(single_valued)


def profile_statement(schema: str, access: ScopeAccess = SHARED) -> sql.Composed:
    """Up to %(max_facts)s live facts of the scope (at %(at)s, confidence >= %(min_confidence)s)
    whose subject is %(subject)s, ranked by the module's rule, the tenant as `access` names it."""
    return tenant_statement(
        """SELECT {cols}, sv.predicate IS NOT NULL AS single_valued
           FROM {s}.facts f
           JOIN {s}.entities a ON a.dataset = f.dataset AND a.project = f.project AND a.id = f.anchor_id
           LEFT JOIN {s}.single_valued sv ON {tenant_sv} AND sv.predicate = lower(f.predicate)
           WHERE {live} AND f.subject = %(subject)s
           ORDER BY sv.predicate IS NOT NULL DESC, f.times_seen DESC, f.confidence DESC, f.id
           LIMIT %(max_facts)s""",
        schema,
        cols=fact_columns(schema),
        live=where("f", access=access),
    )


def render_profile(facts: Sequence[Fact]) -> str:
    """The profile block of `facts` (any order: rendered in id order), or "" when there are none."""
    if not facts:
        return ""
    lines = [f"- {fact_text(fact)}" for fact in sorted(facts, key=lambda fact: fact.id)]
    return "\n\n\n".join([PROFILE_HEADER, "\n".join([PROFILE_HEADING, *lines])])


def build_profile(facts: Sequence[Fact]) -> Profile:
    """The Profile of the chosen `facts` (pure)."""
    ordered = tuple(sorted(facts, key=lambda fact: fact.id))
    text = render_profile(ordered)
    return Profile(text=text, facts=ordered, version=hashlib.sha256(text.encode()).hexdigest()[:16])


def profile(
    info: StoreInfo, scope: Scope, *, subject: str, max_facts: int, min_confidence: float, at: datetime
) -> Operation[Profile]:
    """The scope's standing profile at `at`: one read."""
    params = {
        "dataset": scope.dataset,
        "project": scope.project,
        "subject": subject,
        "max_facts": max_facts,
        "min_confidence": min_confidence,
        "at": at,
    }
    access = layout_of(info).access(info, scope, None)  # the tenant bound: a kept plan only where it fits
    rows = yield from execute_as(ProfileRow, profile_statement(info.schema, access), params, access.planning)
    return build_profile([row.fact for row in rows])
