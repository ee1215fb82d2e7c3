"""How one operation's statements reach one scope's rows: `ScopeAccess`, derived once per operation
by the store's layout (`layouts.Layout.access`) and passed to every statement builder, so no signal,
statement builder or operation asks which layout the store has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from psycopg import sql

from memsoda_core.layouts.shards import ShardPlace
from memsoda_core.runner.steps import Planning
from memsoda_core.store.layout import table_refs
from memsoda_core.store.tenant_index import scope_predicate, tenant_predicate
from memsoda_core.validation import Scope


class ScopeSize(NamedTuple):
    """What an operation knows of a scope's size and place (read once, remembered by recall)."""

    facts: int
    placed: bool = False
    """Its dataset has partitions of its own (`store.layout`): its rows are not in the DEFAULT
    partitions, so it runs its own statements whatever its size."""
    moved: bool = False
    """It has leaves of its own (`store.layout.tenant_tables`): its reads may name them. A scope
    never moves back, so this stays true for as long as it is remembered."""
    shards: ShardPlace | None = None
    """On a Citus cluster: its shards and the worker holding them (`layouts.shards`)."""


@dataclass(frozen=True, kw_only=True)
class ScopeAccess:
    """Which tables hold a scope's rows, how its statements name the tenant and how they are planned.
    (How writes send their rows is the store's, not the scope's: `Layout.write_form`.)"""

    named: Scope | None = None
    """The scope whose names every tenant predicate carries as literals (`store.tenant_index.
    scope_predicate`): its partial indexes match and a plan kept for it holds its partitions (or
    Citus routes it to its shard). None: the tenant is bound (%(dataset)s, %(project)s)."""
    default_partitions: bool = False
    """The statements read the DEFAULT partitions by name (`store.layout.table_refs`): a small scope
    of a partitioned store, whose kept plan must not hold (and lock) every partition."""
    planning: Planning = Planning.CACHED
    """How the scope's statements are planned (a signal may plan afresh: `recall.planning`)."""
    leaves: bool = False
    """The tables are `named`'s own leaves, by name (`store.layout.table_refs`): its rows are there
    (its place was read: `ScopeSize.moved`). Planning such a statement opens no partitioned table
    and prunes nothing, a third less planning and first-touch catalog work for a tenant whose plans
    this connection does not keep (bench/RESULTS.md section 10)."""
    kept_named: Scope | None = None
    """As `named`, for the read of the facts recall kept."""
    kept_planning: Planning = Planning.CACHED
    """How that read is planned."""
    moved: ScopeAccess | None = None
    """Where the scope's rows are if another process moved them since its place was read (they were
    not found here): its own partitions. None: its rows cannot move away from where this reads."""
    shards: ShardPlace | None = None
    """The tables are the scope's shards on the Citus worker holding them, by name, and each
    statement returns nothing unless that worker still holds them (`layouts.shards`)."""
    direct: ScopeAccess | None = None
    """The same reads straight from the worker holding the scope's shards (an access with `shards`),
    which keeps their plans (a Citus worker plans each statement the coordinator sends it). The
    runner reads there when it can reach that worker, else as this access says."""

    @property
    def form(self) -> ScopeAccess:
        """Only what the signals' statement text depends on (their memo key: the plan modes, the kept
        read's and the moved access do not change it)."""
        return ScopeAccess(
            named=self.named, default_partitions=self.default_partitions, leaves=self.leaves, shards=self.shards
        )

    def tables(self, schema: str) -> dict[str, sql.Composable]:
        """The tables of a read's template ({facts}, {entities}...: `store.layout.table_refs`)."""
        leaves = self.named if self.leaves else None
        shards = dict(self.shards.relations) if self.shards is not None else None
        return table_refs(schema, default_partitions=self.default_partitions, leaves=leaves, shards=shards)

    def tenant(self, alias: str | None = None) -> sql.Composed:
        """The tenant predicate on `alias`: the scope's names as literals (`named`), or bound."""
        return tenant_predicate(alias) if self.named is None else scope_predicate(self.named, alias)


SHARED = ScopeAccess()
"""The shared statements: the tenant bound, the tables themselves, kept (`CACHED`) plans."""
