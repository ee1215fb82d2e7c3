"""Make a store distributed on a Citus cluster: `distribute(dsn)`, `memsoda distribute`.

Every table holding a `dataset` column is distributed by it (the tenant), all colocated, so a
tenant's rows of every table live on one shard and each of memsoda's statements, which all carry
`dataset = ...` and join on it, runs on that shard alone. Tables without the tenant (`meta`) become
reference tables, copied to every node. A large tenant can get a shard of its own
(`isolate_tenant_to_new_shard`). The settings recall depends on are set for the database on every
node, since the runner's session `SET` stays on the coordinator's connection (see
`worker_settings`).

The SQL builders are pure, `distribution` is a sans-I/O operation (as in `memsoda_core.ops`), and
`distribute` runs it over one psycopg connection. Each step is idempotent and commits on its own,
so an interrupted run is finished by running it again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from psycopg import sql

from memsoda_core.errors import ConfigurationError, StoreError, StoreUnavailableError
from memsoda_core.runner.policy import KNN_SETTINGS
from memsoda_core.runner.steps import Operation, execute, execute_as, own_transaction
from memsoda_core.store import layout as sql_layout
from memsoda_core.store import placement as sql_placement
from memsoda_core.store.schema import bump_layout_generation_statement, read_meta_statement

TENANT_COLUMN = "dataset"
"""The distribution column: every key and join of memsoda's tables starts with it
(`store/schema.py`), so every unique index holds it, as Citus requires."""

TRANSFER_MODES = ("auto", "force_logical", "block_writes")
"""Citus' `shard_transfer_mode` for tenant isolation: logical replication keeps the tenant writable
while its rows move (needs `wal_level = logical`); `block_writes` pauses its writes instead."""


@dataclass(frozen=True)
class TableInfo:
    """One table of the store's schema, as `tables_statement` reads it."""

    name: str
    tenant: bool
    """It has the tenant column (so it is distributed by it), else it becomes a reference table."""
    citus: bool
    """Citus already manages it (an earlier, maybe interrupted, run)."""
    refs: list[str]
    """The tables of the schema its foreign keys point to."""


@dataclass(frozen=True)
class Distribution:
    """What `distribute` did: tables newly distributed / made reference tables, those Citus already
    had, the tenants isolated (with their new shard of the first table), the settings set."""

    distributed: tuple[str, ...]
    reference: tuple[str, ...]
    unchanged: tuple[str, ...]
    isolated: tuple[tuple[str, int], ...]
    settings: tuple[tuple[str, str], ...]


# --- SQL (pure) ---------------------------------------------------------------------------------------------


def citus_version_statement() -> sql.Composed:
    return sql.SQL("SELECT extversion FROM pg_extension WHERE extname = 'citus'").format()


def facts_distributed_statement() -> sql.Composed:
    """One row: whether schema %(schema)s's facts table is distributed (run only where Citus is
    installed, as `pg_dist_partition` exists only there)."""
    return sql.SQL(
        "SELECT EXISTS (SELECT 1 FROM pg_dist_partition"
        " WHERE logicalrelid = to_regclass(format('%%I.facts', %(schema)s::text)))"
    ).format()


def tables_statement() -> sql.Composed:
    """The schema %(schema)s's tables (partitions are distributed with their parent)."""
    return sql.SQL(
        """SELECT c.relname AS name,
                  EXISTS (SELECT 1 FROM pg_attribute a
                          WHERE a.attrelid = c.oid AND a.attname = %(tenant)s AND NOT a.attisdropped) AS tenant,
                  EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid) AS citus,
                  ARRAY(SELECT DISTINCT r.relname::text FROM pg_constraint k JOIN pg_class r ON r.oid = k.confrelid
                        WHERE k.conrelid = c.oid AND k.contype = 'f' AND k.confrelid <> c.oid
                          AND r.relnamespace = c.relnamespace) AS refs
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
           ORDER BY c.relname"""
    ).format()


def _table(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}::regclass").format(sql.Literal(sql.Identifier(schema, table).as_string(None)))


def distribute_table_statement(schema: str, table: str, colocate_with: str | None) -> sql.Composed:
    """Distribute `table` by the tenant; the first one (`colocate_with` None) starts a new colocation
    group with %(shard_count)s shards (NULL: `citus.shard_count`), the others join its group, so a
    tenant's rows of every table share a shard and joins between them stay on it."""
    group = sql.Literal("none" if colocate_with is None else sql.Identifier(schema, colocate_with).as_string(None))
    shards = sql.SQL("%(shard_count)s::int") if colocate_with is None else sql.SQL("NULL")
    return sql.SQL(
        "SELECT create_distributed_table({t}, {column}, colocate_with => {group}, shard_count => {shards})"
    ).format(t=_table(schema, table), column=sql.Literal(TENANT_COLUMN), group=group, shards=shards)


def reference_table_statement(schema: str, table: str) -> sql.Composed:
    return sql.SQL("SELECT create_reference_table({t})").format(t=_table(schema, table))


def tenant_shard_statement(schema: str, table: str) -> sql.Composed:
    """The shard holding tenant %(tenant)s in `table`, and whether it holds that tenant's hash alone."""
    return sql.SQL(
        """SELECT s.shardid, s.shardminvalue = s.shardmaxvalue AS alone
           FROM pg_dist_shard s
           WHERE s.shardid = get_shard_id_for_distribution_column({t}, %(tenant)s::text)"""
    ).format(t=_table(schema, table))


def isolate_statement(schema: str, table: str) -> sql.Composed:
    """Move tenant %(tenant)s to a shard of its own, in `table` and every table colocated with it."""
    return sql.SQL(
        "SELECT isolate_tenant_to_new_shard({t}, %(tenant)s::text, 'CASCADE', shard_transfer_mode => %(mode)s)"
    ).format(t=_table(schema, table))


_SETTING = re.compile(r"SET ([a-z_][a-z0-9_.]*) = ([A-Za-z0-9_.]+)")


def worker_settings(statements: Iterable[sql.SQL] = KNN_SETTINGS) -> tuple[tuple[str, str], ...]:
    """(name, value) of the kNN's session settings (`runner.policy.KNN_SETTINGS`, the one
    definition). Citus runs a routed statement on a worker over its own connection, which never
    sees the coordinator session's `SET`; so recall's kNN there would use pgvector's defaults."""
    pairs = []
    for statement in statements:
        match = _SETTING.fullmatch(statement.as_string(None))
        if match is None:
            raise ValueError(f"not a plain setting: {statement.as_string(None)}")
        pairs.append((match.group(1), match.group(2)))
    return tuple(pairs)


def role_setting_statement(database: str, name: str, value: str) -> sql.Composed:
    """The setting for every role's new sessions in `database`. Citus propagates `ALTER ROLE ... SET`
    to every node (`citus.enable_alter_role_set_propagation`, on by default), and copies it to nodes
    added later; `ALTER DATABASE ... SET` is propagated only for databases Citus created."""
    return sql.SQL("ALTER ROLE ALL IN DATABASE {db} SET {name} = {value}").format(
        db=sql.Identifier(database), name=sql.Identifier(*name.split(".")), value=sql.Literal(value)
    )


def distribution_order(tables: Sequence[TableInfo]) -> list[TableInfo]:
    """Tables referenced by foreign keys first: Citus distributes a table only after the ones its
    foreign keys point to. Ties keep the given order; a cycle raises."""
    pending = {table.name: table for table in tables}
    ordered: list[TableInfo] = []
    while pending:
        ready = [t for t in pending.values() if not any(ref in pending and ref != t.name for ref in t.refs)]
        if not ready:
            raise StoreError(f"foreign keys form a cycle among {sorted(pending)}")
        for table in ready:
            ordered.append(table)
            del pending[table.name]
    return ordered


# --- the operation ------------------------------------------------------------------------------------------


def distribution(
    schema: str, *, isolate: Sequence[str] = (), shard_count: int | None = None, transfer_mode: str = "auto"
) -> Operation[Distribution]:
    """Distribute the store in `schema` (idempotent; each step is its own transaction)."""
    if transfer_mode not in TRANSFER_MODES:
        raise ConfigurationError(f"transfer_mode must be one of {', '.join(TRANSFER_MODES)}")
    if not (yield from execute(citus_version_statement())):
        raise ConfigurationError("this database has no citus extension: distribute needs a Citus coordinator")
    tables = yield from execute_as(TableInfo, tables_statement(), {"schema": schema, "tenant": TENANT_COLUMN})
    if "meta" not in {table.name for table in tables}:
        raise ConfigurationError(f"no memsoda store in schema {schema!r}: open a Memory on it first")
    yield from _plain_tables(schema)
    tables = yield from execute_as(TableInfo, tables_statement(), {"schema": schema, "tenant": TENANT_COLUMN})
    done: dict[str, list[str]] = {"distributed": [], "reference": [], "unchanged": []}
    tenant_tables = [t for t in distribution_order(tables) if t.tenant]
    first = tenant_tables[0].name if tenant_tables else None
    # reference tables first: a distributed table may point to one, never the other way round
    for table in sorted(distribution_order(tables), key=lambda t: t.tenant):
        if table.citus:
            done["unchanged"].append(table.name)
        elif table.tenant:
            colocate = None if table.name == first else first
            yield from execute(distribute_table_statement(schema, table.name, colocate), {"shard_count": shard_count})
            done["distributed"].append(table.name)
        else:
            yield from execute(reference_table_statement(schema, table.name))
            done["reference"].append(table.name)
    ((database,),) = yield from execute(sql.SQL("SELECT current_database()"))
    settings = worker_settings()
    for name, value in settings:
        yield from execute(role_setting_statement(database, name, value))
    isolated = []
    for tenant in isolate:
        if first is None:
            break
        rows = yield from execute(tenant_shard_statement(schema, first), {"tenant": tenant})
        if rows and rows[0][1]:
            isolated.append((tenant, int(rows[0][0])))  # already alone on its shard
            continue
        ((shard,),) = yield from execute(isolate_statement(schema, first), {"tenant": tenant, "mode": transfer_mode})
        isolated.append((tenant, int(shard)))
    # every Memory open on the store reads its statements' forms again (`layouts.generation`)
    yield from execute(bump_layout_generation_statement(schema))
    return Distribution(
        distributed=tuple(done["distributed"]),
        reference=tuple(done["reference"]),
        unchanged=tuple(done["unchanged"]),
        isolated=tuple(isolated),
        settings=settings,
    )


def _plain_tables(schema: str) -> Operation[None]:
    """A partitioned store (`store.layout`, made before Citus was installed here) turned back into
    plain tables, in one transaction, when no tenant has partitions of its own: Citus distributes
    plain tables, and lost rows written to a DEFAULT partition of a distributed table in a probe."""
    meta: dict[str, str] = {str(k): str(v) for k, v in (yield from execute(read_meta_statement(schema)))}
    if meta.get(sql_layout.LAYOUT_KEY) != "partitioned":
        return
    moved = yield from execute(sql_placement.moved_scopes_statement(schema))
    if moved:
        raise ConfigurationError(
            f"{len(moved)} tenants of schema {schema!r} have partitions of their own on this node; "
            "distribute a store whose tenants are all in its shared tables (export and import them)"
        )
    plain = sql.SQL("UPDATE {s}.meta SET value = 'plain' WHERE key = {key}").format(
        s=sql.Identifier(schema), key=sql.Literal(sql_layout.LAYOUT_KEY)
    )
    bump = bump_layout_generation_statement(schema)  # its DEFAULT partitions are gone from now on
    if (yield from own_transaction([*sql_layout.unpartition_statements(schema), plain, bump])) is None:
        raise StoreError(f"could not turn schema {schema!r}'s partitioned tables into plain ones; nothing changed")


def distribute(
    dsn: str,
    schema: str = "memsoda",
    *,
    isolate: Sequence[str] = (),
    shard_count: int | None = None,
    transfer_mode: str = "auto",
) -> Distribution:
    """Make the store in `schema` on the Citus coordinator `dsn` distributed (see the module's
    docstring); `isolate`: tenants (datasets) to move to shards of their own. Idempotent. Raises
    `ConfigurationError` (no Citus, no store), `StoreUnavailableError` (cannot connect) or
    `StoreError` (Citus refused a step)."""
    import psycopg

    from memsoda_core.runner.sync_runner import Runner

    operation = distribution(schema, isolate=isolate, shard_count=shard_count, transfer_mode=transfer_mode)
    try:
        conn = psycopg.connect(dsn, autocommit=True)  # each step commits on its own: see `distribution`
    except psycopg.OperationalError as exc:
        raise StoreUnavailableError(f"could not connect to the coordinator: {exc}") from exc
    with conn:
        return Runner.run_on(conn, operation)
