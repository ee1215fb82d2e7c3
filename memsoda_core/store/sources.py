"""SQL builders of fact provenance (`fact_sources`) and the fact states `remember` checks. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import sql

from memsoda_core.store.statements import tenant_statement


def insert_sources(schema: str) -> sql.Composed:
    """Record that facts %(fact_ids)s came from messages %(message_ids)s of thread %(thread_id)s."""
    return tenant_statement(
        """INSERT INTO {s}.fact_sources (dataset, project, fact_id, thread_id, message_id)
           SELECT %(dataset)s, %(project)s, u.fact_id, %(thread_id)s, u.message_id
           FROM unnest(%(fact_ids)b::bigint[], %(message_ids)b::text[]) AS u(fact_id, message_id)""",
        schema,
    )


@dataclass(frozen=True)
class SourceRow:
    fact_id: int
    thread_id: str | None
    message_id: str | None
    created_at: datetime


def fact_sources(schema: str) -> sql.Composed:
    """The `SourceRow`s of fact %(id)s, oldest first."""
    return tenant_statement(
        """SELECT fact_id, thread_id, message_id, created_at FROM {s}.fact_sources
           WHERE {tenant} AND fact_id = %(id)s ORDER BY id""",
        schema,
    )


@dataclass(frozen=True)
class TargetKey:
    """A fact `remember` may change: its id and its value's key (for the relation locks)."""

    id: int
    subject: str
    predicate: str
    object: str


def target_keys(schema: str) -> sql.Composed:
    """The `TargetKey`s of facts %(ids)s."""
    return tenant_statement(
        "SELECT id, subject, predicate, object FROM {s}.facts WHERE {tenant} AND id = ANY(%(ids)b::bigint[])",
        schema,
    )
