"""How big a scope is, remembered: recall picks its statements and plans by it (the store's layout
turns it into the scope's `layouts.access.ScopeAccess`).

A scope under the tenant-index threshold is searched exactly, so every such scope shares one set
of prepared statements and their kept plan. A scope with its own partial indexes gets statements
naming it where those indexes must match, run on their generic plans; a plan shared with other
scopes could not use them (bench/RESULTS.md, "Kept plans"). See docs/ARCHITECTURE.md, "Plans and pools".

The size is read once (a primary-key lookup) and remembered for `SCOPE_SIZE_TTL_S`; writes through
the same store forget it. A size out of date is never wrong SQL, both kinds of statement mean the
same: a scope that just crossed the threshold is then searched exactly instead of through its
(approximate) HNSW, more slowly; one that shrank below it runs its own statements."""

from __future__ import annotations

from memsoda_core.layouts.access import ScopeSize
from memsoda_core.recall.remembered import ScopeMemo
from memsoda_core.runner.steps import Planning

SCOPE_SIZE_TTL_S = 30.0
"""How long a scope's fact count is trusted. Another process may grow a scope past the threshold
meanwhile; until then this one searches it exactly (correct, slower)."""

SCOPE_SIZES_KEPT = 4096


class ScopeSizes(ScopeMemo[ScopeSize]):
    """scope -> `ScopeSize`, for `SCOPE_SIZE_TTL_S`, at most `SCOPE_SIZES_KEPT` scopes."""

    def __init__(self, ttl_s: float = SCOPE_SIZE_TTL_S, size: int = SCOPE_SIZES_KEPT) -> None:
        super().__init__(ttl_s, size)


PLANNED_AFRESH = frozenset({"date"})
"""Signals whose statement is planned with its values at every run, on any scope: the date list's
best plan depends on how many facts the window holds (index ranges for a few, the HNSW for many),
which a generic plan cannot know; kept generic, an empty window in a 100k-fact tenant scanned the
HNSW until its budget ran out (bench/RESULTS.md section 6, "Speed of this change ..."). Such
questions are few, and planning one costs about a millisecond."""


def statement_planning(signals: tuple[str, ...], planning: Planning) -> Planning:
    """How a statement running `signals` is planned, given the scope's `planning`."""
    return Planning.FRESH if PLANNED_AFRESH.intersection(signals) else planning
