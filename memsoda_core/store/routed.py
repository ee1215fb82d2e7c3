"""The tenant-index check in the form a distributed store (layout "citus") can run: Citus
cannot join a shard's rows with the coordinator's catalog in one step. (The write path's routed
inserts are `writing.inserts`.) Pure."""

from __future__ import annotations

from psycopg import sql


def missing_indexes_statement() -> sql.Composed:
    """`tenant_index.missing_statement` without the scope's row (the caller has read its size, on
    its shard): `MissingIndex` of each of %(names)s not a valid index in schema %(schema)s, read
    from the coordinator's catalog alone, as Citus cannot join a shard's rows with it in one step."""
    return sql.SQL(
        """SELECT n.name, c.oid IS NOT NULL AS present
           FROM unnest(%(names)b::text[]) AS n(name)
           LEFT JOIN pg_namespace ns ON ns.nspname = %(schema)s
           LEFT JOIN pg_class c ON c.relnamespace = ns.oid AND c.relname = n.name
           LEFT JOIN pg_index i ON i.indexrelid = c.oid
           WHERE i.indisvalid IS NOT TRUE
           ORDER BY n.name"""
    ).format()
