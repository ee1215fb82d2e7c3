"""Upkeep: a large scope's own indexes (built, set aside for an import, dropped) and the planner's
statistics (operations)."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from memsoda_core.runner.steps import (
    Execute,
    Maintain,
    Operation,
    Planning,
)
from memsoda_core.store import statements as sql_write
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import (
    Scope,
)


def ensure_tenant_indexes(info: StoreInfo, scope: Scope) -> Operation[list[str]]:
    """Once the scope holds `tenant_index_min_facts` facts, build its missing partial indexes
    (committing first what the operation wrote); returns the names built. Skipped when another
    session holds the scope's build lock. An index left invalid by a crashed build is dropped first."""
    indexes = sql_tenant_index.tenant_indexes(scope)
    rows = yield Execute(
        sql_tenant_index.missing_statement(info.schema),
        sql_tenant_index.missing_params(info.schema, scope, info.tenant_index_min_facts),
    )
    missing = {str(name): bool(present) for name, present in rows}
    if not missing:
        return []
    lock = sql_tenant_index.lock_key(info.schema, scope)
    locked = yield Maintain(sql_tenant_index.lock_statement(), lock)
    if not locked or not locked[0][0]:
        return []  # another session is building them, or an import has set them aside
    # Maintain steps never raise (a failure replies None), so the lock is always released.
    steps: list[tuple[str | None, sql.Composed]] = []  # (the index it builds, if any; its DDL)
    for index in indexes:
        if index.name in missing:
            if missing[index.name]:  # left invalid by a crashed build
                steps.append((None, sql_tenant_index.drop_statement(info.schema, index)))
            steps.append((index.name, sql_tenant_index.create_statement(info.schema, scope, index)))
    succeeded = yield from _index_ddl([statement for _, statement in steps])
    yield Maintain(sql_tenant_index.lock_statement(release=True), lock)
    return [name for name, _ in steps[:succeeded] if name is not None]


def _index_ddl(statements: Sequence[sql.Composed]) -> Operation[int]:
    """Run index DDL outside the transaction, under the build settings (memory, lock timeout),
    stopping at the first failure (what stopped it, a lock timeout most likely, would stop the
    rest too). Returns how many succeeded."""
    for setting in sql_tenant_index.build_settings():
        yield Maintain(setting)
    succeeded = 0
    for statement in statements:
        if (yield Maintain(statement)) is None:
            break
        succeeded += 1
    for setting in sql_tenant_index.build_settings(reset=True):
        yield Maintain(setting)
    return succeeded


def ensure_all_tenant_indexes(info: StoreInfo) -> Operation[list[str]]:
    """`ensure_tenant_indexes` for every scope at or above the size threshold: run at open, so a
    store from before tenant indexes, or one whose build was interrupted, is brought up to date."""
    rows = yield Execute(
        sql_tenant_index.large_scopes_statement(info.schema), {"min_facts": info.tenant_index_min_facts}
    )
    built: list[str] = []
    for dataset, project in rows:
        built += yield from ensure_tenant_indexes(info, Scope(dataset=dataset, project=project))
    return built


def maintain(info: StoreInfo) -> Operation[list[str]]:
    """Refresh planner statistics, then build the tenant indexes every large scope lacks (say,
    after rows were loaded around memsoda with COPY). Returns the names of the indexes built."""
    yield from refresh_statistics(info)
    return (yield from ensure_all_tenant_indexes(info))


def scope_fact_count(info: StoreInfo, scope: Scope, planning: Planning = Planning.FRESH) -> Operation[int]:
    """How many facts `scope` holds (0 for a scope never written)."""
    rows = yield Execute(
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
    when the import is large), so the rows are written without per-row HNSW maintenance; the
    import's `ensure_tenant_indexes` builds it again once (and the runner tries again if the
    import fails). On this project's 2-core machine a build ran at ~4,000 facts/s and per-row
    maintenance at ~600, even on a bare table holding nothing but the HNSW index (one-off
    measurements, bench/RESULTS.md "Ingest"), so rebuilding the whole scope wins while the import is
    above ~1/7 of it; 1/4 leaves a margin. Meanwhile the scope's vector search is exact (correct,
    slower).

    The scope's build lock is taken first (nothing is dropped while another session builds) and
    handed over to the import's transaction, so writers into the scope meanwhile do not start a
    build that would wait for the import; it is released when the import commits or rolls back.
    Returns whether the index was dropped."""
    if rebuild is False:
        return False
    held = yield from scope_fact_count(info, scope)
    if held < info.tenant_index_min_facts or (rebuild is None and incoming * IMPORT_REBUILD_SHARE < held):
        return False
    index = sql_tenant_index.fact_vector_index(scope)
    present = yield Execute(sql_tenant_index.present_statement(), {"names": [index.name], "schema": info.schema})
    if not present:
        return False
    lock = sql_tenant_index.lock_key(info.schema, scope)
    locked = yield Maintain(sql_tenant_index.lock_statement(), lock)
    if not locked or not locked[0][0]:
        return False  # being built elsewhere: keep it
    dropped = yield from _index_ddl([sql_tenant_index.drop_statement(info.schema, index)])
    yield Execute(sql_tenant_index.transaction_lock_statement(), lock)  # opens the import's transaction
    yield Execute(sql_tenant_index.lock_statement(release=True), lock)
    return bool(dropped)


def drop_tenant_indexes(info: StoreInfo, scope: Scope) -> Operation[None]:
    """Drop a forgotten scope's partial indexes (after the delete is committed), with the build's
    lock timeout: like a build, DROP INDEX CONCURRENTLY waits for older transactions. One left
    behind by a timeout costs disk only (it matches no row) and is dropped by a later forget."""
    indexes = sql_tenant_index.tenant_indexes(scope)
    rows = yield Execute(
        sql_tenant_index.present_statement(), {"names": [i.name for i in indexes], "schema": info.schema}
    )
    present = {str(name) for (name,) in rows}
    yield from _index_ddl([sql_tenant_index.drop_statement(info.schema, i) for i in indexes if i.name in present])


ANALYZE_FROM_PAGES = 64
"""About 256 facts."""


def statistics_stale(analyzed_pages: int, pages: int) -> bool:
    """True when the facts table has doubled in size since it was last analyzed (and holds at
    least ~256 facts): statistics are then refreshed in the same transaction. A never-analyzed
    store plans recall as nested loops on one-row estimates (bench.soak --no-analyze measured
    175 ms instead of 13 ms at 200 facts), and autovacuum may take a minute to notice. Doubling
    bounds it to log2(size) refreshes in the store's life, however many tenants grow in it; an
    earlier per-tenant rule re-analyzed a 210k-fact table (3.4 s) each time any tenant passed 256,
    512, 1,024... facts."""
    return pages >= ANALYZE_FROM_PAGES and pages >= 2 * analyzed_pages


def refresh_statistics(info: StoreInfo) -> Operation[None]:
    for statement in sql_write.analyze(info.schema):
        yield Execute(statement)
