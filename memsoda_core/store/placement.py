"""SQL of where a scope's rows are on a partitioned store (`store.layout`): its size and whether its
dataset has partitions of its own (recall), and what a move or an index build still has to do."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from memsoda_core.store.layout import leaf_indexes
from memsoda_core.store.template import schema_sql
from memsoda_core.store.tenant_index import tenant_indexes, tenant_predicate
from memsoda_core.validation import Scope


def scope_size_statement(schema: str) -> sql.Composed:
    """The fact count of scope %(dataset)s / %(project)s, whether its dataset has partitions of
    its own, so that its rows are not in the DEFAULT partitions, and whether it has leaves of its
    own (no row for a scope never written), named as `layouts.access.ScopeSize`'s fields."""
    return schema_sql(
        """SELECT sc.fact_count AS facts,
                  EXISTS (SELECT 1 FROM {s}.tenant_partitions tp WHERE tp.dataset = sc.dataset) AS placed,
                  EXISTS (SELECT 1 FROM {s}.tenant_partitions tp
                          WHERE tp.dataset = sc.dataset AND tp.project = sc.project) AS moved
           FROM {s}.scopes sc WHERE {tenant}""",
        schema,
        tenant=tenant_predicate("sc"),
    )


@dataclass(frozen=True)
class Placement:
    """A row of `placement_statement`."""

    facts: int
    moved: bool
    """The scope has its own leaves."""
    placed: bool
    """Its dataset has partitions of its own (this scope's or another project's)."""
    missing: list[str] | None
    """Of the leaf indexes, those not built yet (an invalid one included); None for a small scope."""
    invalid: list[str] | None
    """Of the leaf indexes, those a crashed build left invalid."""
    legacy: list[str] | None
    """Of the scope's partial indexes on the DEFAULT partitions (a store from before), those present."""


def placement_statement(schema: str) -> sql.Composed:
    """The `Placement` of scope %(dataset)s / %(project)s; the index lists (%(leaf)s, %(legacy)s:
    names) only when it holds %(min_facts)s facts or has moved. No row for a scope never written."""
    return schema_sql(
        """SELECT sc.fact_count AS facts, m.moved, m.placed,
                  CASE WHEN m.moved OR sc.fact_count >= %(min_facts)s THEN
                       ARRAY(SELECT n FROM unnest(%(leaf)s::text[]) n WHERE NOT EXISTS (
                             SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
                             WHERE c.relnamespace = ns.oid AND c.relname = n AND i.indisvalid)) END AS missing,
                  CASE WHEN m.moved OR sc.fact_count >= %(min_facts)s THEN
                       ARRAY(SELECT n FROM unnest(%(leaf)s::text[]) n WHERE EXISTS (
                             SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
                             WHERE c.relnamespace = ns.oid AND c.relname = n AND NOT i.indisvalid)) END AS invalid,
                  CASE WHEN m.moved OR sc.fact_count >= %(min_facts)s THEN
                       ARRAY(SELECT n FROM unnest(%(legacy)s::text[]) n WHERE EXISTS (
                             SELECT 1 FROM pg_class c WHERE c.relnamespace = ns.oid AND c.relname = n)) END AS legacy
           FROM {s}.scopes sc
           JOIN pg_namespace ns ON ns.nspname = %(schema)s
           CROSS JOIN LATERAL (
               SELECT EXISTS (SELECT 1 FROM {s}.tenant_partitions tp
                              WHERE tp.dataset = sc.dataset AND tp.project = sc.project) AS moved,
                      EXISTS (SELECT 1 FROM {s}.tenant_partitions tp WHERE tp.dataset = sc.dataset) AS placed) m
           WHERE {tenant}""",
        schema,
        tenant=tenant_predicate("sc"),
    )


def placement_params(schema: str, scope: Scope, min_facts: int) -> dict[str, object]:
    """The parameters of `placement_statement` for `scope`: its leaf indexes, and the partial indexes
    a store from before may have left it."""
    return {
        "dataset": scope.dataset,
        "project": scope.project,
        "schema": schema,
        "min_facts": min_facts,
        "leaf": [index.name for index in leaf_indexes(scope)],
        "legacy": [index.name for index in tenant_indexes(scope)],
    }


def moved_scopes_statement(schema: str) -> sql.Composed:
    """Every scope with leaves of its own."""
    return schema_sql("SELECT dataset, project FROM {s}.tenant_partitions ORDER BY dataset, project", schema)
