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

import threading
import time
from collections import OrderedDict

from memsoda_core.layouts.access import ScopeSize
from memsoda_core.runner.steps import Planning
from memsoda_core.validation import Scope

SCOPE_SIZE_TTL_S = 30.0
"""How long a scope's fact count is trusted. Another process may grow a scope past the threshold
meanwhile; until then this one searches it exactly (correct, slower)."""

SCOPE_SIZES_KEPT = 4096


class ScopeSizes:
    """A bounded, expiring map of scope -> `ScopeSize` (thread-safe)."""

    def __init__(self, ttl_s: float = SCOPE_SIZE_TTL_S, size: int = SCOPE_SIZES_KEPT) -> None:
        self._ttl_s = ttl_s
        self._size = size
        self._items: OrderedDict[Scope, tuple[ScopeSize, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, scope: Scope) -> ScopeSize | None:
        """What is remembered of `scope`, or None when unknown or expired."""
        with self._lock:
            item = self._items.get(scope)
            if item is None:
                return None
            size, expires = item
            if time.monotonic() >= expires:
                del self._items[scope]
                return None
            self._items.move_to_end(scope)
            return size

    def put(self, scope: Scope, facts: int, placed: bool = False) -> None:
        with self._lock:
            self._items[scope] = (ScopeSize(facts, placed), time.monotonic() + self._ttl_s)
            self._items.move_to_end(scope)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def forget_all(self) -> None:
        """Drop everything (the store's layout changed: sizes and places are read again)."""
        with self._lock:
            self._items.clear()

    def forget(self, scope: Scope) -> None:
        """Drop what is known of `scope` (it was just written to)."""
        with self._lock:
            self._items.pop(scope, None)


PLANNED_AFRESH = frozenset({"date"})
"""Signals whose statement is planned with its values at every run, on any scope: the date list's
best plan depends on how many facts the window holds (index ranges for a few, the HNSW for many),
which a generic plan cannot know; kept generic, an empty window in a 100k-fact tenant scanned the
HNSW until its budget ran out (bench/RESULTS.md section 6, "Speed of this change ..."). Such
questions are few, and planning one costs about a millisecond."""


def statement_planning(signals: tuple[str, ...], planning: Planning) -> Planning:
    """How a statement running `signals` is planned, given the scope's `planning`."""
    return Planning.FRESH if PLANNED_AFRESH.intersection(signals) else planning
