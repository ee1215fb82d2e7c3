"""How big a scope is, remembered: recall picks its statements and plans by it (the store's layout
turns it into the scope's `layouts.access.ScopeAccess`).

A scope under the tenant-index threshold is searched exactly, so every such scope shares one set
of prepared statements and their kept plan. A scope with its own partial indexes gets statements
naming it where those indexes must match, run on their generic plans; a plan shared with other
scopes could not use them (bench/RESULTS.md, "Kept plans"). See docs/ARCHITECTURE.md, "Plans and pools".

The size is read once (a primary-key lookup) and remembered for `SCOPE_SIZE_TTL_S`; a write through
the same store sets it to the count the write left (`ScopeSizes.grow`), or forgets it. A size out of
date is never wrong SQL, both kinds of statement mean the same: a scope that just crossed the
threshold is then searched exactly instead of through its (approximate) HNSW, more slowly; one
that shrank below it runs its own statements.

Where a scope's shards are on Citus (`ScopeSize.shards`) is remembered apart, for
`SHARD_PLACE_TTL_S`: a write changes the scope's size, not its place, so a recall after a write
that forgot the size reads the size alone. A place out of date is found by the read it sends there
(`layouts.shards`), which then forgets it."""

from __future__ import annotations

from memsoda_core.layouts.access import ScopeSize
from memsoda_core.layouts.shards import ShardPlace
from memsoda_core.recall.remembered import ScopeMemo
from memsoda_core.runner.steps import Planning
from memsoda_core.validation import Scope

SCOPE_SIZE_TTL_S = 30.0
"""How long a scope's fact count is trusted. Another process may grow a scope past the threshold
meanwhile; until then this one searches it exactly (correct, slower)."""

SCOPE_SIZES_KEPT = 4096

SHARD_PLACE_TTL_S = 300.0
"""How long where a scope's shards are is trusted (Citus moves them only when told to)."""


class ScopeSizes(ScopeMemo[ScopeSize]):
    """scope -> `ScopeSize`, for `SCOPE_SIZE_TTL_S`, at most `SCOPE_SIZES_KEPT` scopes; and its
    shards' place, for `SHARD_PLACE_TTL_S`, kept when the size is forgotten (`forget`: a write)."""

    def __init__(self, ttl_s: float = SCOPE_SIZE_TTL_S, size: int = SCOPE_SIZES_KEPT) -> None:
        super().__init__(ttl_s, size)
        self._places: ScopeMemo[ShardPlace] = ScopeMemo(SHARD_PLACE_TTL_S, size)

    def put(self, scope: Scope, value: ScopeSize, read_at: int | None = None) -> None:
        super().put(scope, value, read_at)
        if value.shards is not None and value.shards != self._places.get(scope):  # trusted from its read
            self._places.put(scope, value.shards)

    def grow(self, scope: Scope, facts: int, threshold: int, since: int) -> None:
        """`scope` holds `facts` now (a write that began at `since` counted them as it committed):
        its remembered size says so, unless the count crossed `threshold`, the tenant-index
        threshold (its statements change then, and on a partitioned store its place): then it is
        read again. Such writes only add, so of two reports the larger count is the later one."""

        def grown(size: ScopeSize) -> ScopeSize | None:
            if (size.facts >= threshold) != (facts >= threshold):
                return None
            return size._replace(facts=max(size.facts, facts))

        self.update(scope, grown, since)

    def place(self, scope: Scope) -> ShardPlace | None:
        """Where `scope`'s shards were last read to be (None: not known)."""
        return self._places.get(scope)

    def forget_place(self, scope: Scope) -> None:
        """Drop `scope`'s size and place (a read where it was said they are found they are not)."""
        self._places.forget(scope)
        self.forget(scope)

    def forget_all(self) -> None:
        self._places.forget_all()
        super().forget_all()


PLANNED_AFRESH = frozenset({"date"})
"""Signals whose statement is planned with its values at every run, on any scope: the date list's
best plan depends on how many facts the window holds (index ranges for a few, the HNSW for many),
which a generic plan cannot know; kept generic, an empty window in a 100k-fact tenant scanned the
HNSW until its budget ran out (bench/RESULTS.md section 6, "Speed of this change ..."). Such
questions are few, and planning one costs about a millisecond."""


def statement_planning(signals: tuple[str, ...], planning: Planning) -> Planning:
    """How a statement running `signals` is planned, given the scope's `planning`."""
    return Planning.FRESH if PLANNED_AFRESH.intersection(signals) else planning
