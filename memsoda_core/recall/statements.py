"""Recall's statements: the signals' fragments (`signals/`) assembled into independent statements
(one per `SignalSpec.statement`: vector + keyword + recency, anchor) that can run at once, then the
one that reads the facts fusion kept; or, for a scope searched exactly, every signal in one
statement that also reads the columns of the facts fusion will most likely keep
(`kept_hits_statement`).

A statement returns one row per (signal, fact) hit; ranks are 1-based and ties are broken by
recency, then id, so the same data and query always give the same lists. Every value is bound
(`result.statement_params`), each parameter named like the `RecallOptions` field it comes from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import lru_cache

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.layouts.shards import placed_guard
from memsoda_core.recall.fragments import fragment as _fragment
from memsoda_core.recall.hits import DETAIL_TYPES
from memsoda_core.recall.planning import PLANNED_AFRESH
from memsoda_core.recall.signals import (
    REGISTRY,
    RecallPlan,
    SignalSpec,
    by_name,
    planned_signals,
    shared_ctes,
    statement_groups,
)
from memsoda_core.runner.compiled import Compiled, compiled
from memsoda_core.store.fact_columns import fact_columns
from memsoda_core.store.tenant_index import tenant_key
from memsoda_core.validation import Scope

_VALID_AT_US = "(extract(epoch FROM {valid_at})*1e6)::float8 AS valid_at_us"
"""`HitRow.valid_at_us` (float8: an unknown start, -infinity, is -inf, where an int8 cast would
fail)."""

_COMMON = "{signal} AS signal, fact_id, rank, " + _VALID_AT_US
"""The columns of every hit row (`{valid_at}`: the hit's own `valid_at`)."""

_KEPT_COMMON = "{signal} AS signal, fact_id, rank, valid_at"
"""The columns every hit row of `kept_hits_statement` starts with in its `hits` CTE: `valid_at` as
it is, turned into `valid_at_us` for the ~20 rows returned only, not the ~120 fused."""


def _hit_select(spec: SignalSpec, columns: Sequence[str], common: str = _COMMON) -> sql.Composed:
    """The hit rows of `spec`: the `common` columns, then `columns` (its own expression, else a NULL
    of the column's type), each named (PostgreSQL takes a union's names from its first SELECT)."""
    own = dict(spec.details)
    values: list[sql.Composable] = [sql.SQL(common).format(signal=sql.Literal(spec.name), valid_at=sql.SQL("valid_at"))]
    for column in columns:
        value = own.get(column, f"NULL::{DETAIL_TYPES[column]}")
        values.append(sql.SQL(value if value == column else f"{value} AS {column}"))
    return sql.SQL("SELECT {values} FROM {hits}").format(values=sql.SQL(", ").join(values), hits=sql.SQL(spec.hits))


def hits_statement(
    schema: str,
    plan: RecallPlan,
    signals: Sequence[str],
    access: ScopeAccess = SHARED,
    registry: Sequence[SignalSpec] = REGISTRY,
) -> sql.Composed:
    """One statement running `signals` of `plan`, returning their hit rows (`hits.HitRow`, with the
    detail columns these signals fill), reading the scope's rows as `access` says."""
    union = _ctes_and_hits(schema, plan, signals, access, registry)
    return sql.Composed([sql.SQL("WITH"), union.ctes, sql.SQL(" "), union.hits])


@dataclass(frozen=True)
class _SignalUnion:
    """What `_ctes_and_hits` builds: the signals' CTEs, the union of their hit rows, and the detail
    columns those rows carry (after the common ones)."""

    ctes: sql.Composed
    hits: sql.Composed
    details: list[str]


def _ctes_and_hits(
    schema: str,
    plan: RecallPlan,
    signals: Sequence[str],
    access: ScopeAccess,
    registry: Sequence[SignalSpec],
    common: str = _COMMON,
) -> _SignalUnion:
    """The CTEs of `signals` (those they share once), the union of their hit rows (`common`
    columns first) and the detail columns these rows have."""
    if not signals:
        raise ValueError("a recall statement needs at least one signal")
    specs = [by_name(registry)[name] for name in signals]
    ctes: list[sql.Composable] = [cte for required in shared_ctes(specs) for cte in required.ctes(schema, plan, access)]
    for spec in specs:
        ctes += spec.ctes(schema, plan, access)
    columns = list(dict.fromkeys(column for spec in specs for column, _ in spec.details))
    hits = sql.SQL(" UNION ALL ").join(_hit_select(spec, columns, common) for spec in specs)
    return _SignalUnion(ctes=sql.SQL(",").join(ctes), hits=hits, details=columns)


_KEPT_HITS = """,
    hits AS ({hits}),
    fused AS (
        SELECT fact_id, sum(1.0::float8 / (%(rrf_k)s::int + rank)) AS score, min(rank) AS best, max(valid_at) AS recent,
               min(signal) AS first_signal
        FROM hits
        GROUP BY fact_id),
    kept AS (
        SELECT fact_id, score FROM fused
        ORDER BY score DESC, best, recent DESC, fact_id DESC
        LIMIT %(kept_candidates)s),
    kept_facts AS MATERIALIZED (
        SELECT {fact_columns}
        FROM {facts} f
        JOIN {entities} a ON {scope_a} AND a.id = f.anchor_id
        WHERE {scope_f} AND f.id = ANY(ARRAY(SELECT fact_id FROM kept)))
SELECT {hit_columns}, k.*
FROM hits h
JOIN fused fu ON fu.fact_id = h.fact_id
LEFT JOIN kept_facts k ON k.id = h.fact_id AND h.signal = fu.first_signal
WHERE (h.rank = 1
   OR fu.score >= (SELECT min(score) FROM kept) - {tie}){placed}"""
"""The tail of `kept_hits_statement`. The kept facts' columns are a CTE of their own, read by the ids
of `kept` as an array: planned apart from the hits they are joined to, and without a join to
`kept`, which costs less to plan (the statement is planned at every call on a Citus worker:
bench/RESULTS.md, "Planning a small scope's statement"). Each kept fact's columns are sent once,
on the row of its first signal by name (`fused.first_signal`; NULLs on its other rows, as on an
unkept fact's), not on each of its rows (`operation.recall` takes a fact's columns from the row
that has them). RRF sums are float8: each term is the double `fusion.rrf_scores` adds, and summed
in the rows' order a sum differs from its exactly rounded one by an ulp or so, far inside `TIE`
(numeric cost more to divide, add and sort: bench/RESULTS.md, "The live facts in id order")."""

TIE = Decimal("1e-9")
"""How far below the last kept fact's RRF sum a fact's rows are still returned: far wider than the
difference rounding makes between SQL's sums and Python's (`fusion.rrf_scores`, about 1e-17 at
sums under 0.2); a wider margin only returns more rows."""


def one_statement(scope_facts: int, tenant_index_min_facts: int, signals: Sequence[str]) -> bool:
    """Whether `signals` run in one statement (`kept_hits_statement`) for a scope of `scope_facts`
    facts rather than in statements at once: a scope under the tenant-index threshold is searched
    exactly, each signal costing little beside the round trips, so a second connection and the read
    after fusion cost more than they save (bench/RESULTS.md section 2). Not when a signal is planned
    afresh (`planning.PLANNED_AFRESH`): the whole statement would then be planned at every run."""
    return scope_facts < tenant_index_min_facts and not PLANNED_AFRESH.intersection(signals)


def kept_hits_statement(
    schema: str, plan: RecallPlan, access: ScopeAccess = SHARED, registry: tuple[SignalSpec, ...] = REGISTRY
) -> Compiled:
    """Every signal of `plan` in one statement, its hit rows (`hits.HitRow`) each with the columns of
    its fact (`HitRow.fact`) when the fact is among the %(kept_candidates)s that RRF over the
    statement's ranks (k %(rrf_k)s) puts first, ties as `result.fuse_hits` breaks them; NULLs for
    the others. Fusion itself stays `result.fuse_hits`'s: a fact it keeps without columns (one left
    out by `exclude`, a tie at the cut) is read after it, as every kept fact is in the other form.

    Only the rows fusion can use are returned: every row of a fact whose RRF sum reaches the last of
    those %(kept_candidates)s (less `TIE`), and each list's first (the relevance floor reads the
    vector list's). A fact below that has %(kept_candidates)s facts above it by more than rounding
    in either sum, so fusion, which keeps fewer (`operation.KEPT_MARGIN`, `exclude`), never keeps
    it: most of a recall's ~110 rows, left undecoded and unfused (bench/RESULTS.md, "One scan of a
    small scope")."""
    form = access.form
    if form.named is None:
        return _kept_hits_statement(schema, plan, form, registry)
    template = _kept_hits_statement(schema, plan, replace(form, named=TEMPLATE_SCOPE), registry)
    return for_scope(template, form.named)


@lru_cache(maxsize=1024)
def _kept_hits_statement(
    schema: str, plan: RecallPlan, access: ScopeAccess, registry: tuple[SignalSpec, ...]
) -> Compiled:
    plan = replace(plan, exact=True)  # its signals read the scope's live facts once (`signals.live`)
    union = _ctes_and_hits(schema, plan, planned_signals(plan, registry), access, registry, common=_KEPT_COMMON)
    hit_columns = sql.SQL(", ").join(
        [
            sql.SQL("h.signal, h.fact_id, h.rank, " + _VALID_AT_US).format(valid_at=sql.SQL("h.valid_at")),
            *(sql.Identifier("h", column) for column in union.details),
        ]
    )
    columns = fact_columns(schema, tables=access.tables(schema), named=access.named)
    tail = _fragment(
        _KEPT_HITS,
        schema,
        access=access,
        hits=union.hits,
        hit_columns=hit_columns,
        fact_columns=columns,
        tie=sql.Literal(TIE),
        placed=sql.SQL("") if access.shards is None else sql.SQL(" AND {}").format(placed_guard(access.shards)),
    )
    return rendered(sql.Composed([sql.SQL("WITH"), union.ctes, tail]))


STATEMENT_GROUPS: tuple[tuple[str, ...], ...] = statement_groups()
"""The signals each recall statement runs. The runner may execute the statements at once on two
connections: the anchor signal costs about as much as the other two together, so the two halves take
about the same time (bench/RESULTS.md, "Concurrent recall statements")."""


TEMPLATE_SCOPE = Scope(dataset="memsoda:template-dataset:7d3f0c", project="memsoda:template-project:7d3f0c")
"""The scope a named statement is composed for once, its names then replaced by a tenant's
(`for_scope`). Its quoted names occur in the text only where a tenant's would."""

_TEMPLATE_LITERALS = tuple(
    sql.Literal(name).as_bytes(None) for name in (TEMPLATE_SCOPE.dataset, TEMPLATE_SCOPE.project)
)
_TEMPLATE_KEY = tenant_key(TEMPLATE_SCOPE).encode()
"""The template's key in the names of its leaves (`store.layout.tenant_tables`, `ScopeAccess.leaves`):
16 hex digits that occur in the text only there."""
_TEMPLATE_NAMES = re.compile(b"|".join(re.escape(name) for name in (*_TEMPLATE_LITERALS, _TEMPLATE_KEY)))


FOR_SCOPE_CACHE = 256
"""How many (template, scope) statements `for_scope` keeps: a recall's few templates for the
tenants recalled lately, each recall of one of them spared the substitution."""


@lru_cache(maxsize=FOR_SCOPE_CACHE)
def for_scope(template: Compiled, scope: Scope) -> Compiled:
    """`template` (a statement naming `TEMPLATE_SCOPE`) naming `scope` instead: each quoted name
    replaced by the scope's, quoted as composing for `scope` quotes it (`sql.Literal`), and its
    leaves' key by the scope's, in one pass (a scope's names may hold the template's), so the text
    is the one composed for `scope` itself. Neither holds placeholders, so the parameters stay as
    they are. Memoized (`FOR_SCOPE_CACHE`): the substitution walks the whole text at each recall of
    a named scope."""
    dataset, project = _TEMPLATE_LITERALS
    quoted = {
        dataset: sql.Literal(scope.dataset).as_bytes(None),
        project: sql.Literal(scope.project).as_bytes(None),
        _TEMPLATE_KEY: tenant_key(scope).encode(),
    }
    query = _TEMPLATE_NAMES.sub(lambda match: quoted[match[0]], template.query)
    return Compiled(query, template.names, template.binary)


def rendered(statement: sql.Composed) -> Compiled:
    """`statement` compiled once (`runner.compiled`): the text PostgreSQL reads, run as it is."""
    return compiled(statement)


def recall_statements(
    schema: str, plan: RecallPlan, access: ScopeAccess = SHARED, registry: tuple[SignalSpec, ...] = REGISTRY
) -> tuple[Compiled, ...]:
    """The statements of a recall (one per statement number of the signals `plan` runs), independent
    of each other, rendered. Memoized: a store asks for the same few (schema, plan) pairs every time.

    `access.named`: a scope with its own partial indexes (or partitions). Its statements then name
    it, as literals, in the three predicates those indexes must match (facts' kNN and text match,
    entity names' kNN), so that a plan PostgreSQL keeps for the statement still uses them; every
    other value stays bound. This is the one place where values enter the SQL text (quoted by psycopg, as in the
    indexes' own DDL): a generic plan over bound tenant values cannot use a partial index, and
    planning them at every run was much of their cost (bench/RESULTS.md, "Kept plans").

    A named scope's statements are the memoized ones of `TEMPLATE_SCOPE` with its names put in
    (`for_scope`): composing them afresh for each of many large tenants, or memoizing one set per
    tenant, would cost more than the recall itself for a tenant not recalled lately."""
    form = access.form
    if form.named is None:
        return _recall_statements(schema, plan, form, registry)
    templates = _recall_statements(schema, plan, replace(form, named=TEMPLATE_SCOPE), registry)
    return tuple(for_scope(template, form.named) for template in templates)


@lru_cache(maxsize=1024)
def _recall_statements(
    schema: str, plan: RecallPlan, access: ScopeAccess, registry: tuple[SignalSpec, ...]
) -> tuple[Compiled, ...]:
    return tuple(
        rendered(hits_statement(schema, plan, group, access, registry)) for group in recall_groups(plan, registry)
    )


def recall_groups(plan: RecallPlan, registry: tuple[SignalSpec, ...] = REGISTRY) -> tuple[tuple[str, ...], ...]:
    """The signals of each statement `recall_statements` renders for `plan`, in the same order."""
    planned = planned_signals(plan, registry)
    if not planned:
        raise ValueError("a recall plan needs at least one signal")
    groups = (tuple(name for name in group if name in planned) for group in statement_groups(registry))
    return tuple(group for group in groups if group)


def facts_statement(schema: str, access: ScopeAccess = SHARED) -> Compiled:
    """The columns of the facts fusion kept (%(fact_ids)s), in the scope: read where `access` says
    (`ScopeAccess.tables`), the tenant `ScopeAccess.kept_named` or bound, so that the plan kept for
    a large scope of a partitioned store holds its own partitions only."""
    named = access.kept_named
    kept = ScopeAccess(
        named=None if named is None else TEMPLATE_SCOPE,
        default_partitions=access.default_partitions,
        leaves=access.leaves and named is not None,
    )
    template = _facts_statement(schema, kept)
    return template if named is None else for_scope(template, named)


@lru_cache(maxsize=1024)
def _facts_statement(schema: str, kept: ScopeAccess) -> Compiled:
    return rendered(
        _fragment(
            """SELECT {fact_columns}
           FROM {facts} f
           JOIN {entities} a ON {scope_a} AND a.id = f.anchor_id
           WHERE {scope_f} AND f.id = ANY(%(fact_ids)b::bigint[])""",
            schema,
            access=kept,
            fact_columns=fact_columns(schema, tables=kept.tables(schema), named=kept.named),
        )
    )


@lru_cache(maxsize=64)
def episodes_statement(schema: str) -> Compiled:
    """Nearest episode summaries of the scope (one vector search)."""
    return rendered(
        sql.SQL(
            """SELECT id, thread_id, text, created_at, 1 - (embedding <=> %(qvec)s) AS similarity
           FROM {s}.episodes
           WHERE dataset = %(dataset)s AND project = %(project)s AND created_at <= %(at)s
           ORDER BY embedding <=> %(qvec)s, id DESC
           LIMIT %(episodes_k)s"""
        ).format(s=sql.Identifier(schema))
    )


@lru_cache(maxsize=64)
def recent_episodes_statement(schema: str) -> Compiled:
    """The scope's latest episode summaries (a recall without a vector)."""
    return rendered(
        sql.SQL(
            """SELECT id, thread_id, text, created_at, NULL::float8 AS similarity
           FROM {s}.episodes
           WHERE dataset = %(dataset)s AND project = %(project)s AND created_at <= %(at)s
           ORDER BY created_at DESC, id DESC
           LIMIT %(episodes_k)s"""
        ).format(s=sql.Identifier(schema))
    )
