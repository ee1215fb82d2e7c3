"""The Citus layout: the plain tables distributed by the tenant (`distributed.py`, `memsoda
distribute`), a large tenant with partial indexes as in the plain layout (or a shard of its own).

Every scope runs statements of its own, prepared (`CACHED`): Citus keeps a plan routed to one shard
only when the tenant is a literal in it (a bound one fails to plan generically), and planning a
routed statement afresh on the coordinator cost more than running it (bench/RESULTS.md, "Citus at
its defaults"). Not `GENERIC`: its setting around the statement makes one implicit transaction,
which Citus opens on the worker with two more round trips. The worker still parses and plans each
statement (Citus sends it unnamed and keeps a shard plan for single-table queries only), so a
small scope's recall stays one statement (bench/RESULTS.md, "Where a
small tenant's recall goes on Citus")."""

from __future__ import annotations

from typing import Any

from memsoda_core.layouts.access import ScopeAccess, ScopeSize
from memsoda_core.layouts.plain import PlainLayout, scope_fact_count
from memsoda_core.layouts.write_form import WriteForm
from memsoda_core.runner.steps import Operation, Planning, execute_as
from memsoda_core.store import routed as sql_routed
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope


class CitusLayout(PlainLayout):
    name = "citus"
    opened_with = False
    write_form = WriteForm.ROWS
    """VALUES with the tenant bound in every row: Citus routes it to the tenant's one shard (the
    `unnest` form it plans on the coordinator and copies into the shard)."""

    def statistics_table(self) -> str | None:
        return None  # a distributed table's pages are on the workers, which analyze their shards

    def access(self, info: StoreInfo, scope: Scope, size: ScopeSize | None) -> ScopeAccess:
        if size is None:  # a statement binding the tenant: planned with its values, so Citus routes it
            return ScopeAccess(planning=Planning.FRESH)
        return ScopeAccess(named=scope, planning=Planning.CACHED, kept_named=scope)

    def missing(self, info: StoreInfo, scope: Scope, params: dict[str, object]) -> Operation[list[Any]]:
        """The scope's row on its shard, then the coordinator's catalog: each one step."""
        if (yield from scope_fact_count(info, scope)) < info.tenant_index_min_facts:
            return []
        rows: list[Any] = yield from execute_as(
            sql_tenant_index.MissingIndex, sql_routed.missing_indexes_statement(), params
        )
        return rows


LAYOUT = CitusLayout()
