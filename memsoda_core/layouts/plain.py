"""The plain layout: one table of each kind for every tenant, a large tenant with partial HNSW and
GIN indexes of its own (`store.tenant_index`). A scope under the threshold runs the shared
statements on kept plans; a large one its own, naming it where its indexes must match, on their
generic plans (`recall.planning`, bench/RESULTS.md "Kept plans")."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess, ScopeSize
from memsoda_core.layouts.ddl import index_ddl, took_lock
from memsoda_core.layouts.write_form import WriteForm
from memsoda_core.runner.steps import Operation, Planning, execute, execute_as, outside_transaction
from memsoda_core.store import statements as sql_store
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.tenant_index import TenantIndex
from memsoda_core.validation import Scope


def scope_fact_count(info: StoreInfo, scope: Scope, planning: Planning = Planning.FRESH) -> Operation[int]:
    """How many facts `scope` holds (0 for a scope never written)."""
    rows = yield from execute(
        sql_tenant_index.scope_facts_statement(info.schema),
        {"dataset": scope.dataset, "project": scope.project},
        planning,
    )
    return int(rows[0][0]) if rows else 0


class PlainLayout:
    name = "plain"
    opened_with = True
    on_citus = True
    write_form = WriteForm.ARRAYS

    def access(self, info: StoreInfo, scope: Scope, size: ScopeSize | None) -> ScopeAccess:
        """A large scope's own statements, named, on their generic plans; else the shared ones."""
        if size is None or size.facts < info.tenant_index_min_facts:
            return SHARED
        return ScopeAccess(named=scope, planning=Planning.GENERIC)

    def scope_size(
        self, info: StoreInfo, scope: Scope, planning: Planning, *, shards: bool = False
    ) -> Operation[ScopeSize]:
        return ScopeSize((yield from scope_fact_count(info, scope, planning)))

    def missing(self, info: StoreInfo, scope: Scope, params: dict[str, object]) -> Operation[list[Any]]:
        """`MissingIndex` rows of the scope's partial indexes (none under the threshold)."""
        rows: list[Any] = yield from execute_as(
            sql_tenant_index.MissingIndex, sql_tenant_index.missing_statement(info.schema), params
        )
        return rows

    def grow(self, info: StoreInfo, scope: Scope, *, move: bool = True) -> Operation[list[str]]:
        """The scope's partial indexes, once it holds `tenant_index_min_facts` facts. Skipped when
        another session holds the scope's build lock; an index left invalid by a crashed build is
        dropped first."""
        indexes = sql_tenant_index.tenant_indexes(scope)
        params = sql_tenant_index.missing_params(info.schema, scope, info.tenant_index_min_facts)
        rows = yield from self.missing(info, scope, params)
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

    def grow_all(self, info: StoreInfo, *, move: bool) -> Operation[list[str]]:
        scopes = yield from execute_as(
            Scope, sql_tenant_index.large_scopes_statement(info.schema), {"min_facts": info.tenant_index_min_facts}
        )
        built: list[str] = []
        for scope in scopes:
            built += yield from self.grow(info, scope)
        return built

    def fact_vector_index(self, scope: Scope) -> TenantIndex:
        return sql_tenant_index.fact_vector_index(scope)

    def create_statements(self, schema: str) -> list[sql.Composed]:
        return []

    def analyze_statements(self, schema: str) -> list[sql.Composed]:
        return sql_store.analyze(schema)

    def statistics_table(self) -> str | None:
        return "facts"

    def write_hold(self, schema: str) -> sql.Composed | None:
        return None

    def lacking(self, conn: Any, schema: str, scope: Scope, threshold: int) -> list[str]:
        params = sql_tenant_index.missing_params(schema, scope, threshold)
        return [str(name) for name, _ in conn.execute(sql_tenant_index.missing_statement(schema), params).fetchall()]


LAYOUT = PlainLayout()
