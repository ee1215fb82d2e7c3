"""SQL builders of fact provenance (`fact_sources`) and the fact states `remember` checks. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import sql

from memsoda_core.store.statements import tenant_statement
from memsoda_core.store.tenant_index import table_alias


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


# --- forgetting a source ----------------------------------------------------------------------------


def _matched(alias: str, *, thread: bool, messages: bool) -> sql.Composed:
    """The source rows being forgotten: of thread %(thread_id)s, and/or with a message id in
    %(message_ids)s (of any thread when no thread is given)."""
    a = table_alias(alias)
    parts: list[sql.Composable] = []
    if thread:
        parts.append(sql.SQL("{a}.thread_id = %(thread_id)s").format(a=a))
    if messages:
        parts.append(sql.SQL("{a}.message_id = ANY(%(message_ids)b::text[])").format(a=a))
    if not parts:
        raise ValueError("a source to forget needs a thread or message ids")
    return sql.SQL(" AND ").join(parts)


def drop_shared_sources(schema: str, *, thread: bool, messages: bool) -> sql.Composed:
    """Delete the forgotten source rows of facts that were also learned elsewhere (those facts
    stay, with their other sources). Returns one row: how many such facts."""
    return tenant_statement(
        """WITH dropped AS (
               DELETE FROM {s}.fact_sources fs
               WHERE {tenant_fs} AND {matched}
                 AND EXISTS (SELECT 1 FROM {s}.fact_sources o
                             WHERE {tenant_o} AND o.fact_id = fs.fact_id AND ({other}) IS NOT TRUE)
               RETURNING fs.fact_id)
           SELECT count(DISTINCT fact_id) FROM dropped""",
        schema,
        matched=_matched("fs", thread=thread, messages=messages),
        other=_matched("o", thread=thread, messages=messages),
    )


def only_sourced_facts(schema: str, *, thread: bool, messages: bool) -> sql.Composed:
    """`deleting.delete_facts`' selection of the facts whose remaining sources are all being
    forgotten (run after `drop_shared_sources`, which leaves no other fact with such a row)."""
    return tenant_statement(
        "SELECT DISTINCT fs.fact_id FROM {s}.fact_sources fs WHERE {tenant_fs} AND {matched}",
        schema,
        matched=_matched("fs", thread=thread, messages=messages),
    )


def delete_thread_episodes(schema: str) -> sql.Composed:
    """Delete the scope's episodes of thread %(thread_id)s. Returns one row: how many."""
    return tenant_statement(
        """WITH gone AS (DELETE FROM {s}.episodes WHERE {tenant} AND thread_id = %(thread_id)s RETURNING 1)
           SELECT count(*) FROM gone""",
        schema,
    )
