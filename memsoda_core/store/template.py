"""The one SQL template helper: a statement over the store's schema (`{s}`), parts composed by psycopg.sql."""

from __future__ import annotations

from psycopg import sql


def schema_sql(template: str, schema: str, **parts: sql.Composable) -> sql.Composed:
    """`template` with `{s}` as the schema's identifier and `parts` in their places (values stay bound)."""
    return sql.SQL(template).format(s=sql.Identifier(schema), **parts)
