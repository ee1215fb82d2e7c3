"""What an open store is: where its tables live and which vector space they hold."""

from __future__ import annotations

from dataclasses import dataclass

from memsoda_core.store import tenant_index as sql_tenant_index


@dataclass(frozen=True, kw_only=True)
class StoreInfo:
    """What an open store is: where its tables live and which vector space they hold."""

    schema: str
    model: str
    dimensions: int
    text_search_config: str
    tenant_index_min_facts: int = sql_tenant_index.DEFAULT_MIN_FACTS
    """A scope gets its own HNSW and GIN indexes from this many facts (see `store.tenant_index`)."""
    layout: str = "plain"
    """The store's tenant layout, a name of `layouts.REGISTRY`: "plain" (one table of each kind, a
    large tenant with partial indexes), "partitioned" (a large tenant in partitions of its own) or
    "citus" (plain tables distributed by Citus, `memsoda distribute`). Every statement builder gets
    what it implies from the scope's `layouts.access.ScopeAccess`, the write path from its strategy
    (`layouts.layout_of`)."""
    layout_generation: int = 0
    """The store's layout generation as this process read it (`store.schema.LAYOUT_GENERATION_KEY`):
    bumped by `memsoda distribute` and by a tenant's move to partitions of its own, so an operation
    that finds it changed reloads the store's info and runs again (`errors.LayoutChangedError`)."""
    legacy_starts_through: int | None = None
    """The highest fact id written before schema v6, when a fact written without `valid_at` got
    the time of its write as its start: such starts cannot be told from given ones (`store.schema._v6`).
    None: every fact was written by v6 or later."""
    read_only: bool = False
    """Open read-only (asked for, or a read-only session: a hot standby, a read replica, a read-only
    role): reads only; every write raises `ReadOnlyStoreError` before anything is sent."""
