"""What a tenant layout is to the rest of memsoda: where a scope's rows are, how a scope grows, the
layout's DDL and what `memsoda doctor` checks. One module per layout implements it (`plain`,
`partitioned`, `citus`), registered in `layouts.REGISTRY`; nothing else asks which layout a store has."""

from __future__ import annotations

from typing import Any, Protocol

from psycopg import sql

from memsoda_core.layouts.access import ScopeAccess, ScopeSize
from memsoda_core.layouts.write_form import WriteForm
from memsoda_core.runner.steps import Operation, Planning
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.tenant_index import TenantIndex
from memsoda_core.validation import Scope


class Layout(Protocol):
    """One tenant layout (a strategy: stateless, one instance in the registry)."""

    name: str
    """As `StoreInfo.layout` and the meta table record it."""
    opened_with: bool
    """`Memory.open(layout=name)` creates a store in it (a Citus store comes from `distribute`)."""
    on_citus: bool
    """A new store may be created in it on a Citus database (`layouts.new_store_layout`)."""
    write_form: WriteForm
    """How its writes send a batch of rows (`writing.inserts` builds either form)."""

    def access(self, info: StoreInfo, scope: Scope, size: ScopeSize | None) -> ScopeAccess:
        """How an operation's statements reach `scope`'s rows, given its size and place (None: an
        operation that reads none, whose statements bind the tenant)."""
        ...

    def scope_size(
        self, info: StoreInfo, scope: Scope, planning: Planning, *, shards: bool = False
    ) -> Operation[ScopeSize]:
        """Read what `access` needs of `scope` (one primary-key lookup); with `shards`, where its
        shards are too, on a layout that spreads scopes over nodes (`ScopeSize.shards`)."""
        ...

    def grow(self, info: StoreInfo, scope: Scope, *, move: bool = True) -> Operation[list[str]]:
        """Once `scope` holds `tenant_index_min_facts` facts, give it its own indexes (or partitions,
        when `move`), outside the operation's transaction; the names built."""
        ...

    def grow_all(self, info: StoreInfo, *, move: bool) -> Operation[list[str]]:
        """`grow` for every scope that needs it (at open and in `maintain`)."""
        ...

    def fact_vector_index(self, scope: Scope) -> TenantIndex:
        """The HNSW index over a large scope's fact embeddings (what an import sets aside)."""
        ...

    def create_statements(self, schema: str) -> list[sql.Composed]:
        """DDL turning a just created (plain) store into this layout."""
        ...

    def analyze_statements(self, schema: str) -> list[sql.Composed]:
        """Refresh the planner's statistics of the tenant tables."""
        ...

    def statistics_table(self) -> str | None:
        """The facts table whose pages tell a write when to run `analyze_statements` (None: no
        write does, the pages are not on this node)."""
        ...

    def write_hold(self, schema: str) -> sql.Composed | None:
        """What a write into dataset %(dataset)s holds before its first statement, until it commits,
        so the layout does not change under it (None: nothing)."""
        ...

    def lacking(self, conn: Any, schema: str, scope: Scope, threshold: int) -> list[str]:
        """`memsoda doctor`: what a large `scope` lacks of its own indexes or partitions (a psycopg
        connection, read only)."""
        ...
