"""A scope's statistics, the kind of memory it is: one read of its latest facts, remembered.

`recall.adaptive` chooses the fusion from them. They are read from the scope's `SAMPLE_FACTS` most
recently written facts (a backward scan of the facts' primary key, live or not), so the read costs
the same at any scope size and does not depend on the time a recall reads at. A recall reads them
only when the caller left options to the memory, and then at most once per `SCOPE_STATS_TTL_S` per
scope; a write through the same store forgets them (`MemoryContext.resizing`)."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from memsoda_core.models import ScopeStats
from memsoda_core.recall.remembered import ScopeMemo
from memsoda_core.runner.steps import Operation, Planning, execute_as
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.tenant_index import tenant_predicate
from memsoda_core.validation import Scope

SAMPLE_FACTS = 200
"""How many of the latest facts the statistics are read from: enough for a share to be stable to a
few points, few enough to read in one index page range."""

SCOPE_STATS_TTL_S = 60.0
"""How long a scope's statistics are trusted: a memory's kind does not change between two messages,
and a write through this store forgets them at once."""

SCOPE_STATS_KEPT = 4096


@dataclass(frozen=True, kw_only=True)
class StatsRow:
    """The counts the statement returns, by column name."""

    sampled: int
    top_subject: int
    lexemes: int
    restated: int


def latest_facts_query(schema: str, columns: sql.Composable) -> sql.Composed:
    """`columns` (of facts `f`) of scope %(dataset)s / %(project)s's latest %(sample_facts)s facts,
    live or not: a backward scan of the primary key, the sample a scope's statistics and its
    relevance levels (`recall.relevance`) are read from."""
    return sql.SQL("SELECT {columns} FROM {s}.facts f WHERE {tenant} ORDER BY f.id DESC LIMIT %(sample_facts)s").format(
        columns=columns, s=sql.Identifier(schema), tenant=tenant_predicate("f")
    )


def stats_statement(schema: str) -> sql.Composed:
    """The counts over scope %(dataset)s / %(project)s's latest %(sample_facts)s facts: how many,
    how many have the most common subject, their summed lexeme count (`length(tsv)`), how many
    were written again (`times_seen` > 1)."""
    return sql.SQL(
        """WITH latest AS ({latest})
SELECT (SELECT count(*) FROM latest) AS sampled,
       coalesce((SELECT count(*) FROM latest GROUP BY subject_id ORDER BY count(*) DESC LIMIT 1), 0) AS top_subject,
       (SELECT coalesce(sum(lexemes), 0) FROM latest) AS lexemes,
       (SELECT count(*) FROM latest WHERE times_seen > 1) AS restated"""
    ).format(latest=latest_facts_query(schema, sql.SQL("f.subject_id, length(f.tsv) AS lexemes, f.times_seen")))


def decode_stats(row: StatsRow) -> ScopeStats:
    """The shares and means of the counts (all 0 for a scope without facts)."""
    n = int(row.sampled)
    if n == 0:
        return ScopeStats(sampled=0, subject_share=0.0, lexemes_per_fact=0.0, restated_share=0.0)
    return ScopeStats(
        sampled=n,
        subject_share=round(int(row.top_subject) / n, 4),
        lexemes_per_fact=round(int(row.lexemes) / n, 2),
        restated_share=round(int(row.restated) / n, 4),
    )


class ScopeStatsCache(ScopeMemo[ScopeStats]):
    """scope -> `ScopeStats`, for `SCOPE_STATS_TTL_S`, at most `SCOPE_STATS_KEPT` scopes."""

    def __init__(self, ttl_s: float = SCOPE_STATS_TTL_S, size: int = SCOPE_STATS_KEPT) -> None:
        super().__init__(ttl_s, size)


def read_scope_stats(info: StoreInfo, scope: Scope) -> Operation[ScopeStats]:
    """One read of `scope`'s statistics. Planned with its values (`FRESH`): on a partitioned store
    that prunes to the scope's partition, and it runs once per `SCOPE_STATS_TTL_S`."""
    rows = yield from execute_as(
        StatsRow,
        stats_statement(info.schema),
        {"dataset": scope.dataset, "project": scope.project, "sample_facts": SAMPLE_FACTS},
        Planning.FRESH,
    )
    return decode_stats(rows[0] if rows else StatsRow(sampled=0, top_subject=0, lexemes=0, restated=0))


def scope_stats(info: StoreInfo, scope: Scope, cache: ScopeStatsCache | None) -> Operation[ScopeStats]:
    """`scope`'s statistics: remembered in `cache`, or read (and remembered)."""
    known = cache.get(scope) if cache is not None else None
    if known is not None:
        return known
    stats = yield from read_scope_stats(info, scope)
    if cache is not None:
        cache.put(scope, stats)
    return stats
