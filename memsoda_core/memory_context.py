"""`MemoryContext`: what every operation builder reads of an open memory, as one value."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TypeVar

from memsoda_core.errors import ReadOnlyStoreError
from memsoda_core.learning.extractors import Extractor
from memsoda_core.options import DEFAULT_OPTIONS, RecallOptions
from memsoda_core.recall.planning import ScopeSizes
from memsoda_core.recall.relevance import CalibrationCache
from memsoda_core.recall.remembered import ticket
from memsoda_core.recall.scope_stats import ScopeStatsCache
from memsoda_core.runner.steps import Operation, after_commit, reported
from memsoda_core.scope_growth import Growth
from memsoda_core.store.info import StoreInfo
from memsoda_core.synthesis import Synthesizer
from memsoda_core.validation import Scope

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class MemoryContext:
    """The open store's info, the default recall options, the scope-size cache, the models.

    A memory replaces its context when the store's info changes (a reembed's switch), keeping the
    same caches; builders read it when they build, so an operation built later sees the new one.
    """

    info: StoreInfo
    options: RecallOptions = DEFAULT_OPTIONS
    scope_sizes: ScopeSizes = field(default_factory=ScopeSizes)
    scope_stats: ScopeStatsCache = field(default_factory=ScopeStatsCache)
    calibrations: CalibrationCache = field(default_factory=CalibrationCache)
    synthesizer: Synthesizer | None = None
    extractor: Extractor | None = None
    worker_reads: bool = True
    """On a Citus store, a small scope's recall is read on the worker holding its shards
    (`layouts.citus`)."""

    @staticmethod
    def now() -> datetime:
        return datetime.now(UTC)

    def resizing(self, scope: Scope, op: Operation[T]) -> Operation[T]:
        """`op`, a write that changes what `scope` holds; what is remembered of the scope (its size,
        its statistics, its relevance levels) is dropped once the write has committed."""
        self._writing(scope, ticket())
        result = yield from op
        yield from after_commit(partial(self.forget_scope, scope))
        return result

    def growing(self, scope: Scope, op: Operation[T]) -> Operation[T]:
        """`op`, a write that only adds to `scope` (facts, their ends, repeats: never deletes), and
        reports what it did (`steps.Wrote`): the scope's remembered size and sample are updated from
        that instead of read again at the next recall; its relevance levels are dropped. Without a
        report (it wrote nothing), as `resizing`. Either once the write has committed."""
        began = ticket()
        self._writing(scope, began)
        result, growths = yield from reported(op)
        yield from after_commit(partial(self._grown, scope, growths, began))
        return result

    def _writing(self, scope: Scope, began: int) -> None:
        """A write of `scope` began: what a recall read before it is not remembered after it."""
        for memo in (self.scope_sizes, self.scope_stats, self.calibrations):
            memo.writing(scope, began)

    def _grown(self, scope: Scope, growths: list[Growth], began: int) -> None:
        if not growths:
            self.forget_scope(scope)
            return
        counted = [growth.facts for growth in growths if growth.facts is not None]
        if counted:
            self.scope_sizes.grow(scope, max(counted), self.info.tenant_index_min_facts, began)
        self.scope_stats.grow(scope, growths, began)
        self.calibrations.forget(scope)

    def forget_scope(self, scope: Scope) -> None:
        """Drop what is remembered of `scope` (it was just written to)."""
        self.scope_sizes.forget(scope)
        self.scope_stats.forget(scope)
        self.calibrations.forget(scope)

    def check_writable(self, what: str) -> None:
        """Refuse a write before anything is sent when the store is open read-only."""
        if self.info.read_only:
            raise ReadOnlyStoreError(
                f"{what} writes, and this store is open read-only (read_only=True, or a read-only "
                "session: a hot standby, a read replica, a read-only role); write through a memory "
                "opened read-write on the primary"
            )
