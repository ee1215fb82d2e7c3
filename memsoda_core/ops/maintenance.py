"""Upkeep: a large scope's own indexes (built, set aside for an import, dropped) and the planner's
statistics (operations)."""

from __future__ import annotations

from memsoda_core.layouts import layout_of
from memsoda_core.layouts.ddl import index_ddl, took_lock
from memsoda_core.layouts.plain import scope_fact_count
from memsoda_core.runner.steps import Operation, execute, outside_transaction
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import (
    Scope,
)


def ensure_tenant_indexes(info: StoreInfo, scope: Scope) -> Operation[list[str]]:
    """Once the scope holds `tenant_index_min_facts` facts, give it its own indexes (committing
    first what the operation wrote), as the store's layout does (`layouts.Layout.grow`: partial
    indexes, or partitions of its own with their indexes). Returns the names built. Skipped when
    another session holds the scope's build lock. An index left invalid by a crashed build is
    dropped first."""
    return (yield from layout_of(info).grow(info, scope))


def ensure_all_tenant_indexes(info: StoreInfo, *, move: bool = False) -> Operation[list[str]]:
    """`ensure_tenant_indexes` for every scope at or above the size threshold: run at open, so a
    store from before tenant indexes, or one whose build was interrupted, is brought up to date.
    On a partitioned store a large scope moves to its partitions only with `move` (`maintain`; a
    write into it moves it too): at open, moving every large tenant of an upgraded store could
    take long, and meanwhile its partial indexes serve it."""
    return (yield from layout_of(info).grow_all(info, move=move))


def maintain(info: StoreInfo) -> Operation[list[str]]:
    """Refresh planner statistics, then build the tenant indexes every large scope lacks (say,
    after rows were loaded around memsoda with COPY). Returns the names of the indexes built."""
    yield from refresh_statistics(info)
    return (yield from ensure_all_tenant_indexes(info, move=True))


IMPORT_REBUILD_SHARE = 4
"""An import bringing at least 1/4 as many facts as its scope holds sets the scope's fact HNSW aside
and rebuilds it once after the rows (`set_aside_fact_index`)."""


def set_aside_fact_index(info: StoreInfo, scope: Scope, incoming: int, rebuild: bool | None) -> Operation[bool]:
    """Before an import into a scope with its own fact HNSW: drop that index when `rebuild` (None:
    when the import brings `1/IMPORT_REBUILD_SHARE` of the scope), so the rows are written without
    per-row HNSW maintenance, which is slower than one build of the whole scope (bench/RESULTS.md,
    "Import rebuild"); the import's `ensure_tenant_indexes` builds it again once (and the runner
    tries again if the import fails). Meanwhile the scope's vector search is exact (correct, slower).

    The scope's build lock is taken first (nothing is dropped while another session builds) and
    handed over to the import's transaction, so writers into the scope meanwhile do not start a
    build that would wait for the import; it is released when the import commits or rolls back.
    Returns whether the index was dropped."""
    if rebuild is False:
        return False
    held = yield from scope_fact_count(info, scope)
    if held < info.tenant_index_min_facts or (rebuild is None and incoming * IMPORT_REBUILD_SHARE < held):
        return False
    index = layout_of(info).fact_vector_index(scope)
    present = yield from execute(sql_tenant_index.present_statement(), {"names": [index.name], "schema": info.schema})
    if not present:
        return False
    lock = sql_tenant_index.lock_key(info.schema, scope)
    if not took_lock((yield from outside_transaction(sql_tenant_index.lock_statement(), lock))):
        return False  # being built elsewhere: keep it
    dropped = yield from index_ddl([sql_tenant_index.drop_statement(info.schema, index)])
    yield from execute(sql_tenant_index.transaction_lock_statement(), lock)  # opens the import's transaction
    yield from execute(sql_tenant_index.lock_statement(release=True), lock)
    return bool(dropped)


def drop_tenant_indexes(info: StoreInfo, scope: Scope) -> Operation[None]:
    """Drop a forgotten scope's partial indexes (after the delete is committed), with the build's
    lock timeout: like a build, DROP INDEX CONCURRENTLY waits for older transactions. One left
    behind by a timeout costs disk only (it matches no row) and is dropped by a later forget."""
    indexes = sql_tenant_index.tenant_indexes(scope)
    rows = yield from execute(
        sql_tenant_index.present_statement(), {"names": [i.name for i in indexes], "schema": info.schema}
    )
    present = {str(name) for (name,) in rows}
    yield from index_ddl([sql_tenant_index.drop_statement(info.schema, i) for i in indexes if i.name in present])


ANALYZE_FROM_PAGES = 64
"""About 256 facts."""


def statistics_stale(analyzed_pages: int, pages: int) -> bool:
    """True when the facts table has doubled in size since it was last analyzed (and holds at
    least ~256 facts): statistics are then refreshed in the same transaction, since a store planned
    on stale estimates recalls many times slower and autovacuum may take a minute to notice;
    doubling bounds it to log2(size) refreshes in the store's life, however many tenants grow in it
    (bench/RESULTS.md, "Statistics refresh")."""
    return pages >= ANALYZE_FROM_PAGES and pages >= 2 * analyzed_pages


def refresh_statistics(info: StoreInfo) -> Operation[None]:
    for statement in layout_of(info).analyze_statements(info.schema):
        yield from execute(statement)
