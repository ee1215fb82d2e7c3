"""SQL builders that read stored facts as data: one by id, a filtered page (keyset), a supersede
chain. Pure: each returns a `sql.Composed`; values are always bound."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from memsoda_core.models import Fact
from memsoda_core.store.fact_columns import fact_columns, fact_from
from memsoda_core.store.statements import tenant_statement
from memsoda_core.writing.reconcile_statements import CHAIN_DEPTH


class FactRow:
    """A row of these statements, read by column name."""

    __slots__ = ("fact",)

    def __init__(self, **columns: Any) -> None:
        self.fact: Fact = fact_from(columns)


def _parts(schema: str) -> dict[str, sql.Composable]:
    return {"cols": fact_columns(schema), "from_": sql.SQL(_FROM).format(s=sql.Identifier(schema))}


_FROM = """FROM {s}.facts f
           JOIN {s}.entities a ON a.dataset = f.dataset AND a.project = f.project AND a.id = f.anchor_id"""


def get_fact(schema: str) -> sql.Composed:
    """Fact %(id)s of the scope."""
    return tenant_statement("SELECT {cols} {from_} WHERE {tenant_f} AND f.id = %(id)s", schema, **_parts(schema))


STATUSES = ("live", "ended", "all")


def list_facts(schema: str) -> sql.Composed:
    """Up to %(limit)s facts of the scope with ids above %(after)s, in id order (keyset pages: the
    primary key serves every page alike), filtered by %(subject)s, %(predicate)s (case folded),
    %(entity)s (touching it in any role) and %(status)s at %(as_of)s: "live" (valid then), "ended"
    (ended by then), "all". With %(known_at)s (transaction time), as memory knew it then: only
    facts learned by then (`created_at`), and an end it recorded later (`expired_at`) is not one."""
    return tenant_statement(
        """SELECT {cols} {from_}
           WHERE {tenant_f} AND f.id > %(after)s
             AND (%(subject)s::text IS NULL OR f.subject = %(subject)s)
             AND (%(predicate)s::text IS NULL OR lower(f.predicate) = lower(%(predicate)s))
             AND (%(entity)s::text IS NULL OR EXISTS (
                    SELECT 1 FROM {s}.fact_entities fe
                    JOIN {s}.entities e ON e.dataset = fe.dataset AND e.project = fe.project AND e.id = fe.entity_id
                    WHERE fe.dataset = f.dataset AND fe.project = f.project AND fe.fact_id = f.id
                      AND e.name = %(entity)s))
             AND (%(known_at)s::timestamptz IS NULL OR f.created_at <= %(known_at)s)
             AND CASE %(status)s::text
                   WHEN 'live' THEN f.valid_at <= %(as_of)s AND (f.invalid_at IS NULL OR f.invalid_at > %(as_of)s
                                                                  OR f.expired_at > %(known_at)s)
                   WHEN 'ended' THEN f.invalid_at IS NOT NULL AND f.invalid_at <= %(as_of)s
                                     AND NOT coalesce(f.expired_at > %(known_at)s, false)
                   ELSE true END
           ORDER BY f.id
           LIMIT %(limit)s""",
        schema,
        **_parts(schema),
    )


def history(schema: str) -> sql.Composed:
    """Every fact of the supersede chain of fact %(id)s (those it replaced, transitively, and those
    that replaced it), oldest first."""
    return tenant_statement(
        """WITH RECURSIVE back AS (
               SELECT f.id, 1 AS depth FROM {s}.facts f WHERE {tenant_f} AND f.id = %(id)s
               UNION ALL
               SELECT f.id, b.depth + 1 FROM back b
               JOIN {s}.facts f ON {tenant_f} AND f.superseded_by = b.id
               WHERE b.depth < {depth}),
           ahead AS (
               SELECT f.id, f.superseded_by, 1 AS depth FROM {s}.facts f WHERE {tenant_f} AND f.id = %(id)s
               UNION ALL
               SELECT f.id, f.superseded_by, h.depth + 1 FROM ahead h
               JOIN {s}.facts f ON {tenant_f} AND f.id = h.superseded_by
               WHERE h.depth < {depth})
           SELECT {cols} {from_}
           WHERE {tenant_f} AND f.id IN (SELECT id FROM back UNION SELECT id FROM ahead)
           ORDER BY f.valid_at, f.id""",
        schema,
        **_parts(schema),
        depth=sql.Literal(CHAIN_DEPTH),
    )
