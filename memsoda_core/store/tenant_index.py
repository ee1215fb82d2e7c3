"""SQL of the tenant predicate and of tenant-local indexes: a scope's own HNSW and GIN indexes once
it is large, in the plain layout (what Citus uses; the default layout gives a large scope
partitions of its own instead, `store.layout`, and keeps the names and locks defined here).

No index covers all tenants: one HNSW graph shared by every tenant makes a filtered kNN walk
everybody's rows (bench/RESULTS.md, "Tenant indexes"). A scope under `tenant_index_min_facts`
facts is searched exactly through the (dataset, project) b-trees; from that size on it gets
partial indexes, `WHERE dataset = '…' AND project = '…'`, which recall's own statements for that
scope repeat (`scope_predicate`), so that even the generic plan it keeps can use them. They are
built with CREATE INDEX CONCURRENTLY, outside any transaction, so other tenants keep reading and
writing meanwhile; a session advisory lock keeps two processes from building the same ones, and an
index left invalid by a crashed build is dropped and rebuilt.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from psycopg import sql

from memsoda_core.validation import Scope

DEFAULT_MIN_FACTS = 2_000
"""Below this, an exact scan of the scope is about as fast as an HNSW search and costs nothing on
writes (bench/RESULTS.md, "Tenant indexes")."""

BUILD_MAINTENANCE_WORK_MEM = "1GB"
"""HNSW builds are several times faster when the graph fits in memory (bench/RESULTS.md, "Tenant
indexes"); set for the building session only."""


@dataclass(frozen=True)
class TenantIndex:
    """One partial index of a scope."""

    name: str
    table: str
    method: str
    column: str


def tenant_key(scope: Scope) -> str:
    """A short, collision-safe digest of (dataset, project) for index and lock names."""
    raw = f"{len(scope.dataset)}:{scope.dataset}{scope.project}".encode()
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


def fact_vector_index(scope: Scope) -> TenantIndex:
    """The scope's HNSW index over fact embeddings (the one every write into the scope maintains)."""
    return TenantIndex(f"facts_vec_{tenant_key(scope)}", "facts", "hnsw", "embedding vector_cosine_ops")


def tenant_indexes(scope: Scope) -> tuple[TenantIndex, ...]:
    """The partial indexes a large scope gets: fact vectors, entity-name vectors, fact keywords."""
    key = tenant_key(scope)
    return (
        fact_vector_index(scope),
        TenantIndex(f"entities_vec_{key}", "entities", "hnsw", "embedding vector_cosine_ops"),
        TenantIndex(f"facts_tsv_{key}", "facts", "gin", "tsv"),
    )


def lock_key(schema: str, scope: Scope) -> dict[str, str]:
    """The parameter of `lock_statement` for building (or setting aside) the scope's indexes."""
    return {"lock": f"memsoda-index:{schema}:{tenant_key(scope)}"}


@dataclass(frozen=True)
class MissingIndex:
    """A row of `missing_statement`."""

    name: str
    present: bool
    """True for an index left invalid (by a crashed build), False for an absent one."""


def missing_statement(schema: str) -> sql.Composed:
    """`MissingIndex` of each of %(names)s that is not a valid index yet, for the scope %(dataset)s /
    %(project)s once it holds %(min_facts)s facts; no rows for a smaller scope."""
    return sql.SQL(
        """SELECT n.name, c.oid IS NOT NULL AS present
           FROM {s}.scopes sc
           CROSS JOIN unnest(%(names)b::text[]) AS n(name)
           LEFT JOIN pg_namespace ns ON ns.nspname = %(schema)s
           LEFT JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = n.name
           LEFT JOIN pg_index i ON i.indexrelid = c.oid
           WHERE {tenant} AND sc.fact_count >= %(min_facts)s
             AND i.indisvalid IS NOT TRUE
           ORDER BY n.name"""
    ).format(s=sql.Identifier(schema), tenant=tenant_predicate("sc"))


def present_statement() -> sql.Composed:
    """Which of %(names)s exist (valid or not) in schema %(schema)s."""
    return sql.SQL(
        """SELECT c.relname FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
           WHERE ns.nspname = %(schema)s AND c.relname = ANY(%(names)b::text[])
           ORDER BY c.relname"""
    ).format()


def lock_statement(*, release: bool = False) -> sql.Composed:
    """Try (or release) the session advisory lock for building %(lock)s's indexes."""
    function = "pg_advisory_unlock" if release else "pg_try_advisory_lock"
    return sql.SQL("SELECT {f}(hashtext(%(lock)s))").format(f=sql.Identifier(function))


def transaction_lock_statement() -> sql.Composed:
    """Take %(lock)s's build lock until the current transaction ends (the session holding it
    already gets it at once, and can then release its session lock)."""
    return sql.SQL("SELECT pg_advisory_xact_lock(hashtext(%(lock)s))").format()


def drop_statement(schema: str, index: TenantIndex) -> sql.Composed:
    return sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {s}.{n}").format(
        s=sql.Identifier(schema), n=sql.Identifier(index.name)
    )


_PLAIN_ALIAS = re.compile(r"[a-z_][a-z0-9_]*")


def table_alias(alias: str) -> sql.SQL:
    """A table alias of memsoda's own SQL, written without quotes: it is always a plain lowercase
    word (checked here), so quoting would only change the statements' text."""
    if not _PLAIN_ALIAS.fullmatch(alias):
        raise ValueError(f"not a plain table alias: {alias!r}")
    return sql.SQL(alias)


def _qualifier(alias: str | None) -> sql.Composable:
    return sql.SQL("{}.").format(table_alias(alias)) if alias else sql.SQL("")


def tenant_predicate(alias: str | None = None) -> sql.Composed:
    """`dataset = %(dataset)s AND project = %(project)s`, columns qualified by `alias` if given: the
    bound tenant predicate of every statement on one scope's rows."""
    return sql.SQL("{q}dataset = %(dataset)s AND {q}project = %(project)s").format(q=_qualifier(alias))


def scope_predicate(scope: Scope, alias: str | None = None) -> sql.Composed:
    """`dataset = '…' AND project = '…'` with the scope's names as quoted literals (`sql.Literal`),
    columns qualified by `alias` if given: a tenant index's predicate, and the one a query must
    carry for the planner to use that index in a plan it keeps (`recall.statements.recall_statements`)."""
    return sql.SQL("{q}dataset = {dataset} AND {q}project = {project}").format(
        q=_qualifier(alias), dataset=sql.Literal(scope.dataset), project=sql.Literal(scope.project)
    )


def create_statement(schema: str, scope: Scope, index: TenantIndex) -> sql.Composed:
    """CREATE INDEX CONCURRENTLY for one scope. DDL takes no bound parameters, so the tenant is
    written as quoted literals, which the planner needs anyway to match the index."""
    return sql.SQL("CREATE INDEX CONCURRENTLY IF NOT EXISTS {n} ON {s}.{t} USING {m} ({c}) WHERE {where}").format(
        n=sql.Identifier(index.name),
        s=sql.Identifier(schema),
        t=sql.Identifier(index.table),
        m=sql.SQL(index.method),
        c=sql.SQL(index.column),
        where=scope_predicate(scope),
    )


BUILD_LOCK_TIMEOUT = "5s"
"""CREATE/DROP INDEX CONCURRENTLY wait for every transaction older than themselves, in the whole
database; an application session left idle in a transaction would hold the write that triggered
the build forever. With this timeout the build gives up (leaving an invalid index that the next
write drops and rebuilds) instead."""


def build_settings(*, reset: bool = False) -> list[sql.Composed]:
    """Session settings for building (or, with `reset`, back to the defaults)."""
    if reset:
        return [sql.SQL("RESET maintenance_work_mem").format(), sql.SQL("RESET lock_timeout").format()]
    return [
        sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(BUILD_MAINTENANCE_WORK_MEM)),
        sql.SQL("SET lock_timeout = {}").format(sql.Literal(BUILD_LOCK_TIMEOUT)),
    ]


def scope_facts_statement(schema: str) -> sql.Composed:
    """The fact count of scope %(dataset)s / %(project)s (no row for a scope never written)."""
    return sql.SQL("SELECT fact_count FROM {s}.scopes WHERE {tenant}").format(
        s=sql.Identifier(schema), tenant=tenant_predicate()
    )


def missing_params(schema: str, scope: Scope, min_facts: int) -> dict[str, object]:
    """The parameters of `missing_statement` for `scope`."""
    return {
        "names": [index.name for index in tenant_indexes(scope)],
        "schema": schema,
        "dataset": scope.dataset,
        "project": scope.project,
        "min_facts": min_facts,
    }


def large_scopes_statement(schema: str) -> sql.Composed:
    """Scopes at or above %(min_facts)s facts."""
    return sql.SQL(
        "SELECT dataset, project FROM {s}.scopes WHERE fact_count >= %(min_facts)s ORDER BY dataset, project"
    ).format(s=sql.Identifier(schema))
