"""SQL builders of forget, export and stats, with the rows they return, and `tenant_statement`, the
template every statement over one scope is written with. Pure: each returns a `sql.Composed`;
values are always bound. (The write path's statements are in `memsoda_core.writing`.)"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql

from memsoda_core.models import Fact
from memsoda_core.store.fact_columns import fact_columns, fact_from
from memsoda_core.store.tenant_index import tenant_predicate

_TENANT = re.compile(r"\{tenant(?:_([a-z]+))?\}")


def tenant_statement(template: str, schema: str, **parts: sql.Composable) -> sql.Composed:
    """`template` with {s} the schema, {tenant} the bound tenant predicate (`tenant_predicate`) and
    {tenant_x} the same on alias x, and `parts`."""
    tenants = {match[0][1:-1]: tenant_predicate(match[1]) for match in _TENANT.finditer(template)}
    return sql.SQL(template).format(s=sql.Identifier(schema), **tenants, **parts)


TENANT_TABLES = ("facts", "entities", "fact_entities")
"""The tables whose rows a layout places by tenant, as `analyze` takes them."""


def analyze(schema: str, tenant_tables: Sequence[str] = TENANT_TABLES) -> list[sql.Composed]:
    """Refresh planner statistics of the tables recall reads: `tenant_tables` (`TENANT_TABLES` as
    the store's layout names the ones to sample: `Layout.analyze_statements`), then the others."""
    s = sql.Identifier(schema)
    return [
        sql.SQL("ANALYZE {s}.{t}").format(s=s, t=sql.Identifier(table))
        for table in (*tenant_tables, "lexemes", "episodes", "scopes")
    ]


# --- forget ---------------------------------------------------------------------------------------


def entity_facts(schema: str) -> sql.Composed:
    """`deleting.delete_facts`' selection for `forget(entity=...)`: every fact touching entity
    %(name)s."""
    return tenant_statement(
        """SELECT DISTINCT fe.fact_id FROM {s}.fact_entities fe
           WHERE {tenant_fe} AND fe.entity_id IN (SELECT id FROM {s}.entities WHERE {tenant} AND name = %(name)s)""",
        schema,
    )


def delete_orphan_entities(schema: str) -> sql.Composed:
    """Remove the scope's entities no fact touches any more (after `deleting.delete_facts`): the
    forgotten entity %(name)s itself (None: none named), and others whose only facts went."""
    return tenant_statement(
        """DELETE FROM {s}.entities e
           WHERE {tenant_e}
             AND (e.fact_count <= 0 OR e.name = %(name)s)
             AND NOT EXISTS (SELECT 1 FROM {s}.fact_entities fe
                             WHERE fe.dataset = e.dataset AND fe.project = e.project AND fe.entity_id = e.id)
             AND NOT EXISTS (SELECT 1 FROM {s}.facts f
                             WHERE f.dataset = e.dataset AND f.project = e.project
                               AND (f.subject_id = e.id OR f.anchor_id = e.id))""",
        schema,
    )


def forget_scope(schema: str) -> list[sql.Composed]:
    """Delete everything of one (dataset, project), children first."""
    return [
        tenant_statement("DELETE FROM {s}.{t} WHERE {tenant}", schema, t=sql.Identifier(table))
        for table in ("items", "fact_entities", "facts", "lexemes", "entities", "episodes", "scopes")
    ]


def count_facts(schema: str) -> sql.Composed:
    return tenant_statement("SELECT count(*) FROM {s}.facts WHERE {tenant}", schema)


# --- export ---------------------------------------------------------------------------------------


class ExportedFact:
    """A row of `export_facts`, read by column name: the fact, its subject's type, and whether it is
    items' own (`facts.item_owned`)."""

    __slots__ = ("fact", "item_owned", "subject_type")

    def __init__(self, *, subject_type: str, **columns: Any) -> None:
        self.item_owned = bool(columns.pop("item_owned", False))
        self.fact: Fact = fact_from(columns)
        self.subject_type = subject_type


def export_facts(schema: str) -> sql.Composed:
    """Every fact of a scope as an `ExportedFact`, in id order, by keyset pages."""
    return tenant_statement(
        """SELECT {cols}, st.type AS subject_type, f.item_owned
           FROM {s}.facts f
           JOIN {s}.entities a ON a.dataset = f.dataset AND a.project = f.project AND a.id = f.anchor_id
           JOIN {s}.entities st ON st.dataset = f.dataset AND st.project = f.project AND st.id = f.subject_id
           WHERE {tenant_f} AND f.id > %(after)s
           ORDER BY f.id
           LIMIT %(limit)s""",
        schema,
        cols=fact_columns(schema),
    )


@dataclass(frozen=True)
class EpisodeRow:
    """A row of `export_episodes`."""

    id: int
    thread_id: str | None
    text: str
    created_at: datetime


def export_episodes(schema: str) -> sql.Composed:
    """Every episode of a scope as an `EpisodeRow`, in id order."""
    return tenant_statement(
        "SELECT id, thread_id, text, created_at FROM {s}.episodes WHERE {tenant} ORDER BY id",
        schema,
    )


# --- stats ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopeCounts:
    """A row of `stats`."""

    dataset: str
    project: str
    facts: int
    live_facts: int
    """Facts valid now."""
    entities: int
    episodes: int


def stats(schema: str) -> sql.Composed:
    """`ScopeCounts` of every scope, or of those matching %(dataset)s / %(project)s where given."""
    return tenant_statement(
        """SELECT sc.dataset, sc.project,
                  (SELECT count(*) FROM {s}.facts f WHERE f.dataset = sc.dataset AND f.project = sc.project)
                    AS facts,
                  (SELECT count(*) FROM {s}.facts f WHERE f.dataset = sc.dataset AND f.project = sc.project
                     AND f.valid_at <= now() AND (f.invalid_at IS NULL OR f.invalid_at > now())) AS live_facts,
                  (SELECT count(*) FROM {s}.entities e WHERE e.dataset = sc.dataset AND e.project = sc.project)
                    AS entities,
                  (SELECT count(*) FROM {s}.episodes p WHERE p.dataset = sc.dataset AND p.project = sc.project)
                    AS episodes
           FROM {s}.scopes sc
           WHERE (%(dataset)s::text IS NULL OR sc.dataset = %(dataset)s)
             AND (%(project)s::text IS NULL OR sc.project = %(project)s)
           ORDER BY sc.dataset, sc.project""",
        schema,
    )
