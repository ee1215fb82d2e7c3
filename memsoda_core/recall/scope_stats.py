"""A scope's statistics, the kind of memory it is: one read of its latest facts, remembered.

`recall.adaptive` chooses the fusion from them. They are read from the scope's `SAMPLE_FACTS` most
recently written facts (a backward scan of the facts' primary key, live or not), so the read costs
the same at any scope size and does not depend on the time a recall reads at. A recall reads them
only when the caller left options to the memory, and then at most once per `SCOPE_STATS_TTL_S` per
scope. The sample itself is remembered, so a write through the same store that only adds to the
scope updates it exactly from what it reports (`MemoryContext.growing`); any other write forgets it
(`MemoryContext.resizing`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from psycopg import sql

from memsoda_core.models import ScopeStats
from memsoda_core.recall.remembered import ScopeMemo, ticket
from memsoda_core.runner.steps import Operation, Planning, execute_as
from memsoda_core.scope_growth import Growth, LatestFact
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.tenant_index import tenant_predicate
from memsoda_core.validation import Scope

SAMPLE_FACTS = 200
"""How many of the latest facts the statistics are read from: enough for a share to be stable to a
few points, few enough to read in one index page range."""

SCOPE_STATS_TTL_S = 60.0
"""How long a scope's statistics are trusted: a memory's kind does not change between two messages,
and a write through this store updates (or forgets) them at once; another process's writes show
after this long."""

SCOPE_STATS_KEPT = 4096


def latest_facts_query(schema: str, columns: sql.Composable) -> sql.Composed:
    """`columns` (of facts `f`) of scope %(dataset)s / %(project)s's latest %(sample_facts)s facts,
    live or not: a backward scan of the primary key, the sample a scope's statistics and its
    relevance levels (`recall.relevance`) are read from."""
    return sql.SQL("SELECT {columns} FROM {s}.facts f WHERE {tenant} ORDER BY f.id DESC LIMIT %(sample_facts)s").format(
        columns=columns, s=sql.Identifier(schema), tenant=tenant_predicate("f")
    )


def sample_statement(schema: str) -> sql.Composed:
    """Scope %(dataset)s / %(project)s's latest %(sample_facts)s facts as `LatestFact` rows."""
    return latest_facts_query(schema, sql.SQL("f.id, f.subject_id, length(f.tsv) AS lexemes, f.times_seen"))


def stats_of(latest: Sequence[LatestFact]) -> ScopeStats:
    """The shares and means over `latest`: how many, the share with the most common subject, the
    mean lexeme count, the share written again (`times_seen` > 1); all 0 for no facts."""
    n = len(latest)
    if n == 0:
        return ScopeStats(sampled=0, subject_share=0.0, lexemes_per_fact=0.0, restated_share=0.0)
    top_subject = Counter(fact.subject_id for fact in latest).most_common(1)[0][1]
    return ScopeStats(
        sampled=n,
        subject_share=round(top_subject / n, 4),
        lexemes_per_fact=round(sum(fact.lexemes for fact in latest) / n, 2),
        restated_share=round(sum(fact.times_seen > 1 for fact in latest) / n, 4),
    )


@dataclass(frozen=True)
class ScopeSample:
    """A scope's latest `SAMPLE_FACTS` facts (or all it has), ids descending, and their statistics."""

    latest: tuple[LatestFact, ...]
    stats: ScopeStats


def sample_of(facts: Iterable[LatestFact]) -> ScopeSample:
    """The sample of a scope holding `facts` (at least its latest `SAMPLE_FACTS`)."""
    latest = tuple(sorted(facts, key=lambda fact: fact.id, reverse=True)[:SAMPLE_FACTS])
    return ScopeSample(latest, stats_of(latest))


def grown(sample: ScopeSample, growth: Growth) -> ScopeSample:
    """The sample once a write reported `growth`: its facts are the latest (ids are given in
    order), and the stored ones it wrote again count once more each time. Exact: a fact the
    sample left out is older than every fact in it."""
    restated = dict(growth.restated)
    kept = (
        replace(fact, times_seen=fact.times_seen + restated[fact.id]) if fact.id in restated else fact
        for fact in sample.latest
    )
    return sample_of((*growth.added[-SAMPLE_FACTS:], *kept))


class ScopeStatsCache(ScopeMemo[ScopeSample]):
    """scope -> `ScopeSample`, for `SCOPE_STATS_TTL_S`, at most `SCOPE_STATS_KEPT` scopes."""

    def __init__(self, ttl_s: float = SCOPE_STATS_TTL_S, size: int = SCOPE_STATS_KEPT) -> None:
        super().__init__(ttl_s, size)

    def grow(self, scope: Scope, growths: Sequence[Growth], since: int) -> None:
        """What a write through this store that began at `since` reported of `scope`, applied to
        its remembered sample (kept only as long as the sample read was)."""
        for growth in growths:
            self.update(scope, partial(grown, growth=growth), since)


def read_scope_sample(info: StoreInfo, scope: Scope) -> Operation[ScopeSample]:
    """One read of `scope`'s sample. Planned with its values (`FRESH`): on a partitioned store
    that prunes to the scope's partition, and it runs once per `SCOPE_STATS_TTL_S`."""
    rows = yield from execute_as(
        LatestFact,
        sample_statement(info.schema),
        {"dataset": scope.dataset, "project": scope.project, "sample_facts": SAMPLE_FACTS},
        Planning.FRESH,
    )
    return sample_of(rows)


def scope_stats(info: StoreInfo, scope: Scope, cache: ScopeStatsCache | None) -> Operation[ScopeStats]:
    """`scope`'s statistics: remembered in `cache`, or read (and remembered)."""
    known = cache.get(scope) if cache is not None else None
    if known is not None:
        return known.stats
    read_at = ticket()
    sample = yield from read_scope_sample(info, scope)
    if cache is not None:
        cache.put(scope, sample, read_at)
    return sample.stats
