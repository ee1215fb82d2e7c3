"""Upkeep: a large scope's own indexes (built, set aside for an import, dropped) and the planner's
statistics (operations)."""

from __future__ import annotations

from psycopg import sql

from memsoda_core.ops.ddl import index_ddl, took_lock
from memsoda_core.ops.placing import ensure_all_own_partitions, ensure_own_partition, leaf_fact_index
from memsoda_core.runner.steps import Operation, Planning, execute, execute_as, outside_transaction
from memsoda_core.store import routed as sql_routed
from memsoda_core.store import statements as sql_store
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import (
    Scope,
)


def ensure_tenant_indexes(info: StoreInfo, scope: Scope) -> Operation[list[str]]:
    """Once the scope holds `tenant_index_min_facts` facts, give it its own indexes (committing
    first what the operation wrote): on a partitioned store, partitions of its own with their
    indexes (`ops.placing`); otherwise partial indexes. Returns the names built. Skipped when
    another session holds the scope's build lock. An index left invalid by a crashed build is
    dropped first."""
    if info.partitioned:
        return (yield from ensure_own_partition(info, scope))
    indexes = sql_tenant_index.tenant_indexes(scope)
    params = sql_tenant_index.missing_params(info.schema, scope, info.tenant_index_min_facts)
    if not info.distributed:
        rows = yield from execute_as(
            sql_tenant_index.MissingIndex, sql_tenant_index.missing_statement(info.schema), params
        )
    elif (yield from scope_fact_count(info, scope)) < info.tenant_index_min_facts:
        rows = []  # the scope's row on its shard, then the coordinator's catalog: each one step
    else:
        rows = yield from execute_as(sql_tenant_index.MissingIndex, sql_routed.missing_indexes_statement(), params)
    missing = {row.name: row.present for row in rows}  # present: left invalid by a crashed build
    if not missing:
        return []
    lock = sql_tenant_index.lock_key(info.schema, scope)
    if not took_lock((yield from outside_transaction(sql_tenant_index.lock_statement(), lock))):
        return []  # another session is building them, or an import has set them aside
    # Steps outside the transaction never raise (a failure replies None), so the lock is always released.
    steps: list[tuple[str | None, sql.Composed]] = []  # (the index it builds, if any; its DDL)
    for index in indexes:
        if index.name in missing:
            if missing[index.name]:  # left invalid by a crashed build
                steps.append((None, sql_tenant_index.drop_statement(info.schema, index)))
            steps.append((index.name, sql_tenant_index.create_statement(info.schema, scope, index)))
    succeeded = yield from index_ddl([statement for _, statement in steps])
    yield from outside_transaction(sql_tenant_index.lock_statement(release=True), lock)
    return [name for name, _ in steps[:succeeded] if name is not None]


def ensure_all_tenant_indexes(info: StoreInfo, *, move: bool = False) -> Operation[list[str]]:
    """`ensure_tenant_indexes` for every scope at or above the size threshold: run at open, so a
    store from before tenant indexes, or one whose build was interrupted, is brought up to date.
    On a partitioned store a large scope moves to its partitions only with `move` (`maintain`; a
    write into it moves it too): at open, moving every large tenant of an upgraded store could
    take long, and meanwhile its partial indexes serve it."""
    if info.partitioned:
        return (yield from ensure_all_own_partitions(info, move=move))
    scopes = yield from execute_as(
        Scope, sql_tenant_index.large_scopes_statement(info.schema), {"min_facts": info.tenant_index_min_facts}
    )
    built: list[str] = []
    for scope in scopes:
        built += yield from ensure_tenant_indexes(info, scope)
    return built


def maintain(info: StoreInfo) -> Operation[list[str]]:
    """Refresh planner statistics, then build the tenant indexes every large scope lacks (say,
    after rows were loaded around memsoda with COPY). Returns the names of the indexes built."""
    yield from refresh_statistics(info)
    return (yield from ensure_all_tenant_indexes(info, move=True))


def scope_fact_count(info: StoreInfo, scope: Scope, planning: Planning = Planning.FRESH) -> Operation[int]:
    """How many facts `scope` holds (0 for a scope never written)."""
    rows = yield from execute(
        sql_tenant_index.scope_facts_statement(info.schema),
        {"dataset": scope.dataset, "project": scope.project},
        planning,
    )
    return int(rows[0][0]) if rows else 0


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
    index = leaf_fact_index(scope) if info.partitioned else sql_tenant_index.fact_vector_index(scope)
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
    for statement in sql_store.analyze(info.schema, partitioned=info.partitioned):
        yield from execute(statement)
