"""The partitioned layout (`store.layout`): a large tenant in partitions of its own, moved there and
given its leaf indexes by the operations here. A small scope's statements read the DEFAULT
partitions by name, on kept plans; a large one, or one whose dataset has partitions, names its
tenant as literals, on generic plans (a kept plan over the partitioned tables would hold and lock
every partition at each run)."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from memsoda_core.layouts.access import ScopeAccess, ScopeSize
from memsoda_core.layouts.ddl import index_ddl, took_lock
from memsoda_core.layouts.write_form import WriteForm
from memsoda_core.runner.steps import Operation, Planning, execute_as, outside_transaction, own_transaction
from memsoda_core.store import layout as sql_layout
from memsoda_core.store import placement as sql_placement
from memsoda_core.store import statements as sql_store
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.tenant_index import TenantIndex
from memsoda_core.validation import Scope


def scope_size(info: StoreInfo, scope: Scope, planning: Planning = Planning.FRESH) -> Operation[ScopeSize]:
    """The size of `scope`, placed when its dataset has partitions of its own, so that its rows are
    not in the DEFAULT partitions; (0, False) for a scope never written."""
    rows = yield from execute_as(
        ScopeSize,
        sql_placement.scope_size_statement(info.schema),
        {"dataset": scope.dataset, "project": scope.project},
        planning,
    )
    return rows[0] if rows else ScopeSize(0)


def leaf_fact_index(scope: Scope) -> TenantIndex:
    """The HNSW index of a moved scope's facts (the one every write into it maintains)."""
    return sql_layout.leaf_indexes(scope)[0]


def ensure_own_partition(info: StoreInfo, scope: Scope, *, move: bool = True) -> Operation[list[str]]:
    """Once `scope` holds `tenant_index_min_facts` facts, move it to partitions of its own (when
    `move`), build the leaf indexes it lacks and drop the partial indexes it had on the DEFAULT
    partitions (a store from before); returns the names built. Skipped while another session
    holds the scope's build lock. A failed move is rolled back whole (logged): the tenant stays
    where it was and the next write into it tries again."""
    leaf = sql_layout.leaf_indexes(scope)
    legacy = sql_tenant_index.tenant_indexes(scope)
    rows = yield from execute_as(
        sql_placement.Placement,
        sql_placement.placement_statement(info.schema),
        sql_placement.placement_params(info.schema, scope, info.tenant_index_min_facts),
    )
    if not rows or rows[0].missing is None:
        return []  # never written, or small
    placement = rows[0]
    if not placement.moved and not move:
        return []
    if placement.moved and not placement.missing and not placement.legacy:
        return []
    lock = sql_tenant_index.lock_key(info.schema, scope)
    if not took_lock((yield from outside_transaction(sql_tenant_index.lock_statement(), lock))):
        return []  # another session is moving or building it, or an import has set its index aside
    moved = placement.moved
    if not moved:
        columns = yield from execute_as(
            sql_layout.TableColumns,
            sql_layout.columns_statement(info.schema),
            {"schema": info.schema, "tables": [sql_layout.shared(t) for t in sql_layout.PARTITIONED]},
        )
        by_table = {row.table.removesuffix("_shared"): row.columns for row in columns}
        statements = sql_layout.move_statements(info.schema, scope, by_table, dataset_placed=placement.placed)
        for _ in range(sql_layout.MOVE_ATTEMPTS):  # each failed attempt gave up a lock wait, rolled back
            moved = (yield from own_transaction(statements)) is not None
            if moved:
                break
    built: list[str] = []
    if moved:
        missing = set(placement.missing or []) if placement.moved else {index.name for index in leaf}
        invalid = set(placement.invalid or [])
        steps: list[tuple[str | None, sql.Composed]] = []
        for index in leaf:
            if index.name in invalid:
                steps.append((None, sql_tenant_index.drop_statement(info.schema, index)))
            if index.name in missing:
                steps.append((index.name, sql_layout.create_leaf_index(info.schema, index)))
        if not placement.moved:  # its leaves were filled by the move: give the planner their statistics
            steps += [(None, sql_layout.analyze_leaf(info.schema, table, scope)) for table in sql_layout.PARTITIONED]
        present = set(placement.legacy or [])
        steps += [(None, sql_tenant_index.drop_statement(info.schema, i)) for i in legacy if i.name in present]
        succeeded = yield from index_ddl([statement for _, statement in steps])
        built = [name for name, _ in steps[:succeeded] if name is not None]
    yield from outside_transaction(sql_tenant_index.lock_statement(release=True), lock)
    return built


def ensure_all_own_partitions(info: StoreInfo, *, move: bool) -> Operation[list[str]]:
    """`ensure_own_partition` for every scope at or above the threshold, and every moved one."""
    large = yield from execute_as(
        Scope, sql_tenant_index.large_scopes_statement(info.schema), {"min_facts": info.tenant_index_min_facts}
    )
    moved = yield from execute_as(Scope, sql_placement.moved_scopes_statement(info.schema))
    built: list[str] = []
    for scope in dict.fromkeys([*moved, *large]):
        built += yield from ensure_own_partition(info, scope, move=move)
    return built


def _own(scope: Scope, *, leaves: bool = False, cached: bool = False) -> ScopeAccess:
    """A scope's own statements: its names as literals, on generic plans; with `leaves` (it has
    moved: `ScopeSize.moved`) reading its leaves by name. With `cached` (a scope under the
    tenant-index threshold, searched exactly in one statement) planned as the shared statements of
    a small scope are (`CACHED`): PostgreSQL's custom plans, which know the values, ran faster than
    the generic plan, their planning included (bench/RESULTS.md, "Python around the statement").
    Its names are literals, so any plan of it is pruned to its own partitions."""
    planning = Planning.CACHED if cached else Planning.GENERIC
    return ScopeAccess(named=scope, leaves=leaves, planning=planning, kept_named=scope, kept_planning=planning)


class PartitionedLayout:
    name = "partitioned"
    opened_with = True
    on_citus = False
    """Rows written to a DEFAULT partition of a distributed table were not found again in a probe:
    under Citus a large tenant gets a shard of its own instead."""
    write_form = WriteForm.ARRAYS

    def access(self, info: StoreInfo, scope: Scope, size: ScopeSize | None) -> ScopeAccess:
        """Its own partitions (named; generic plans for a large scope, kept ones for a small placed
        scope) for a large or placed scope, its leaves by name once it has moved; else the DEFAULT
        partitions (kept plans), and its own partitions should another process have moved it since
        its size was read (through the partitioned tables: finding no rows does not prove it has
        leaves). Without a size: the partitioned tables, planned afresh (pruned)."""
        if size is None:
            return ScopeAccess(planning=Planning.FRESH)
        small = size.facts < info.tenant_index_min_facts
        if not small or size.placed:
            return _own(scope, leaves=size.moved, cached=small)
        return ScopeAccess(default_partitions=True, moved=_own(scope, cached=True))

    def scope_size(
        self, info: StoreInfo, scope: Scope, planning: Planning, *, shards: bool = False
    ) -> Operation[ScopeSize]:
        return (yield from scope_size(info, scope, planning))

    def grow(self, info: StoreInfo, scope: Scope, *, move: bool = True) -> Operation[list[str]]:
        return (yield from ensure_own_partition(info, scope, move=move))

    def grow_all(self, info: StoreInfo, *, move: bool) -> Operation[list[str]]:
        return (yield from ensure_all_own_partitions(info, move=move))

    def fact_vector_index(self, scope: Scope) -> TenantIndex:
        return leaf_fact_index(scope)

    def create_statements(self, schema: str) -> list[sql.Composed]:
        return sql_layout.partition_statements(schema)

    def analyze_statements(self, schema: str) -> list[sql.Composed]:
        # the DEFAULT partitions: ANALYZE of a partitioned table would sample every tenant's
        # partition too, which autovacuum analyzes by itself
        return sql_store.analyze(schema, [sql_layout.shared(table) for table in sql_store.TENANT_TABLES])

    def statistics_table(self) -> str | None:
        return sql_layout.shared("facts")  # what every small scope writes into: a placed one analyzes its leaves

    def write_hold(self, schema: str) -> sql.Composed | None:
        return sql_layout.dataset_lock(schema)  # shared; a move takes it alone (`store.layout.move_statements`)

    def lacking(self, conn: Any, schema: str, scope: Scope, threshold: int) -> list[str]:
        """Not moved yet (its partial indexes from before do meanwhile, if all there), or moved with
        leaf indexes missing."""
        params = sql_placement.placement_params(schema, scope, threshold)
        row = conn.execute(sql_placement.placement_statement(schema), params).fetchone()
        if row is None:
            return []
        placement = sql_placement.Placement(*row)
        if placement.moved:
            return list(placement.missing or [])
        legacy = {index.name for index in sql_tenant_index.tenant_indexes(scope)}
        return [] if set(placement.legacy or []) == legacy else ["partitions of its own"]


LAYOUT = PartitionedLayout()
