"""The Citus layout: the plain tables distributed by the tenant (`distributed.py`, `memsoda
distribute`), a large tenant with partial indexes as in the plain layout (or a shard of its own).

Every scope runs statements of its own through the coordinator, prepared (`CACHED`): Citus keeps a
plan routed to one shard only when the tenant is a literal in it (a bound one fails to plan
generically), and planning a routed statement afresh on the coordinator cost more than running it
(bench/RESULTS.md, "Citus at its defaults"). Not `GENERIC`: its setting around the statement makes
one implicit transaction, which Citus opens on the worker with two more round trips.

The worker still parses and plans each statement the coordinator sends it (unnamed; Citus keeps a
shard plan for single-table queries only), which costs a small scope's recall as much as running
it. So a small scope's recall is read straight from its shards on that worker (`ScopeAccess.direct`,
`layouts.shards`), where the plan is kept, one per shard, with the tenant bound; through the
coordinator when the worker cannot be reached from here, or its shards have moved (bench/RESULTS.md,
"Where a small tenant's recall goes on Citus")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memsoda_core.layouts.access import ScopeAccess, ScopeSize
from memsoda_core.layouts.plain import PlainLayout, scope_fact_count
from memsoda_core.layouts.shards import PlacementRow, place_from, place_params, place_statement
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
        routed = ScopeAccess(named=scope, planning=Planning.CACHED, kept_named=scope)
        if size.shards is None or size.facts >= info.tenant_index_min_facts:
            return routed
        return replace(routed, direct=ScopeAccess(shards=size.shards, planning=Planning.CACHED))

    def scope_size(
        self, info: StoreInfo, scope: Scope, planning: Planning, *, shards: bool = False
    ) -> Operation[ScopeSize]:
        """Its fact count, and with `shards`, for a scope under the tenant-index threshold, where
        its shards are (read from the coordinator's metadata)."""
        facts = yield from scope_fact_count(info, scope, planning)
        if not shards or facts >= info.tenant_index_min_facts:
            return ScopeSize(facts)
        rows = yield from execute_as(PlacementRow, place_statement(info.schema), place_params(scope.dataset))
        return ScopeSize(facts, shards=place_from(rows))

    def missing(self, info: StoreInfo, scope: Scope, params: dict[str, object]) -> Operation[list[Any]]:
        """The scope's row on its shard, then the coordinator's catalog: each one step."""
        if (yield from scope_fact_count(info, scope)) < info.tenant_index_min_facts:
            return []
        rows: list[Any] = yield from execute_as(
            sql_tenant_index.MissingIndex, sql_routed.missing_indexes_statement(), params
        )
        return rows


LAYOUT = CitusLayout()
