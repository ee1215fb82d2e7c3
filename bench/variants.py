"""Recall statements for the quality variants, built from memsoda's own fragments.

The default variant is exactly `memsoda_core.recall.signals`' fragments (checked against
`Memory.recall` on every query); the others swap one piece:
- the keyword query form (`KeywordForm`): the core's "OR, at least half the lexemes", plain OR
  (with or without the terms of named hubs), or `plainto_tsquery` (AND, what most hybrid stores use);
- `validity=False`: vector and keyword over every stored row, ignoring validity and confidence
  (what a retriever with no notion of time returns);
- the anchor list's order is changed after the fact (`physical_order`), since "no ORDER BY" is
  what the reference shipped and a statement cannot ask for it deterministically.

Each statement returns (signal, fact_id, rank); fusion is `memsoda_core.recall.fusion.rrf`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from psycopg import sql
from psycopg.rows import class_row

from memsoda_core.layouts.access import SHARED
from memsoda_core.models import FusionChoice
from memsoda_core.options import MAX_OPTION_INT, RecallOptions
from memsoda_core.recall.adaptive import choose
from memsoda_core.recall.fusion import rrf
from memsoda_core.recall.result import statement_params
from memsoda_core.recall.scope_stats import SAMPLE_FACTS, sample_of, sample_statement
from memsoda_core.recall.signals import RecallPlan, RecallRequest
from memsoda_core.recall.signals.anchor import anchor_ctes, near_cte
from memsoda_core.recall.signals.entities import HUB_TERMS, hub_floor_cte, named_cte
from memsoda_core.recall.signals.keyword import keyword_ctes
from memsoda_core.recall.signals.live import live_cte
from memsoda_core.recall.signals.vector import LIVE_NEAREST
from memsoda_core.scope_growth import LatestFact
from memsoda_core.text import normalize_query
from memsoda_core.validation import Scope


class KeywordForm(StrEnum):
    OR = "or"
    """Plain OR of every term of the query, ranked by ts_rank: a full-text retriever's (the
    keyword side of LangChain's EnsembleRetriever). The SQL of `OR_WITH_HUBS`."""
    OR_WITH_HUBS = "or_with_hubs"
    """OR of every term, hub names included."""
    AND = "and"
    """plainto_tsquery over the whole query: every non-stopword term must match."""
    OR_HALF = "or_half"
    """memsoda's default keyword signal (`signals.keyword.keyword_ctes`); without validity, the
    half rule below over every stored row."""
    HALF_TS_RANK = "half_ts_rank"
    """memsoda's keyword signal before issue 20: OR of the terms (hub and common names dropped),
    keeping facts that match at least half of the query's lexemes, ranked by ts_rank."""


_KEYWORD_QUERY = {
    KeywordForm.OR_WITH_HUBS: """
    keyword_query AS (
        SELECT to_tsquery(%(tsconfig)s::regconfig, coalesce(string_agg(t.term, ' | '), '')) AS q,
               coalesce(array_agg(t.term), ARRAY[]::text[]) AS terms
        FROM unnest(%(terms)s::text[]) AS t(term)),""",
    KeywordForm.AND: """
    keyword_query AS (
        SELECT plainto_tsquery(%(tsconfig)s::regconfig, %(raw_query)s) AS q,
               %(terms)s::text[] AS terms),""",
}

_HALF = """
    keyword_query AS (
        SELECT to_tsquery(%(tsconfig)s::regconfig, coalesce(string_agg(t.term, ' | '), '')) AS q,
               coalesce(array_agg(t.part) FILTER (WHERE numnode(t.part) > 0), ARRAY[]::tsquery[]) AS parts
        FROM (SELECT u.term, to_tsquery(%(tsconfig)s::regconfig, u.term) AS part
              FROM unnest(%(terms)s::text[]) AS u(term)
              WHERE u.term NOT IN {hub_terms}) t),
    keyword_hits AS (
        SELECT f.id AS fact_id,
               row_number() OVER (ORDER BY ts_rank(f.tsv, kq.q) DESC, f.valid_at DESC, f.id DESC) AS rank
        FROM keyword_query kq
        JOIN {s}.facts f ON {where} AND f.tsv @@ kq.q
        WHERE 2 * (SELECT count(*) FROM unnest(kq.parts) p WHERE f.tsv @@ p) >= cardinality(kq.parts)
        ORDER BY rank
        LIMIT %(keyword_candidates)s)"""

_KEYWORD_HITS = """
    keyword_hits AS (
        SELECT f.id AS fact_id,
               row_number() OVER (ORDER BY ts_rank(f.tsv, kq.q) DESC, f.valid_at DESC, f.id DESC) AS rank
        FROM keyword_query kq
        JOIN {s}.facts f ON {where} AND f.tsv @@ kq.q
        ORDER BY rank
        LIMIT %(keyword_candidates)s)"""

_HALF_TS_RANK = """
    keyword_query AS (
        SELECT to_tsquery(%(tsconfig)s::regconfig, coalesce(string_agg(t.term, ' | '), '')) AS q,
               coalesce(array_agg(t.term), ARRAY[]::text[]) AS terms,
               coalesce(array_agg(to_tsquery(%(tsconfig)s::regconfig, t.term)), ARRAY[]::tsquery[]) AS term_queries,
               tsvector_to_array(to_tsvector(%(tsconfig)s::regconfig,
                                             coalesce(string_agg(t.term, ' '), ''))) AS lexemes
        FROM unnest(%(terms)b::text[]) AS t(term)
        WHERE t.term NOT IN {hub_terms}
          AND NOT EXISTS (
              SELECT FROM unnest(tsvector_to_array(to_tsvector(%(tsconfig)s::regconfig, t.term))) AS x(lexeme)
              CROSS JOIN LATERAL (SELECT l.facts FROM {s}.lexemes l
                                  WHERE l.dataset = %(dataset)s AND l.project = %(project)s
                                    AND l.lexeme = x.lexeme OFFSET 0) l
              JOIN {s}.scopes sc ON sc.dataset = %(dataset)s AND sc.project = %(project)s
              WHERE l.facts > greatest(%(common_term_min_facts)s, %(common_term_share)s * sc.fact_count))),
    keyword_half AS MATERIALIZED (
        SELECT CASE WHEN cardinality(kq.lexemes) BETWEEN 1 AND %(half_max_lexemes)s
                    THEN (SELECT string_agg(c.conjunction, ' | ')
                          FROM generate_series(1, (1 << cardinality(kq.lexemes)) - 1) AS m(mask)
                          CROSS JOIN LATERAL (
                              SELECT '(' || string_agg(quote_literal(l.lexeme), ' & ') || ')' AS conjunction
                              FROM unnest(kq.lexemes) WITH ORDINALITY AS l(lexeme, i)
                              WHERE m.mask & (1 << (l.i::int - 1)) <> 0) c
                          WHERE bit_count(m.mask::bit(32)) = (cardinality(kq.lexemes) + 1) / 2)::tsquery
                    ELSE kq.q END AS q
        FROM keyword_query kq),
    keyword_pool AS (
        SELECT f.id, f.tsv, f.valid_at, ts_rank(f.tsv, kq.q) AS score
        FROM keyword_query kq, keyword_half kh
        JOIN {s}.facts f ON {where} AND f.tsv @@ kh.q
        ORDER BY score DESC, f.valid_at DESC, f.id DESC
        LIMIT %(keyword_pool)s),
    keyword_hits AS (
        SELECT p.id AS fact_id, p.valid_at,
               ARRAY(SELECT u.term FROM unnest(kq.terms, kq.term_queries) AS u(term, q)
                     WHERE p.tsv @@ u.q) AS matched,
               row_number() OVER (ORDER BY p.score DESC, p.valid_at DESC, p.id DESC) AS rank
        FROM keyword_pool p, keyword_query kq
        WHERE CASE WHEN cardinality(kq.lexemes) <= %(half_max_lexemes)s THEN true
                   ELSE 2 * cardinality(ARRAY(SELECT unnest(tsvector_to_array(p.tsv))
                                              INTERSECT SELECT unnest(kq.lexemes)))
                        >= cardinality(kq.lexemes) END
        ORDER BY rank
        LIMIT %(keyword_candidates)s)"""
"""The keyword CTEs of memsoda before issue 20, as they were (tests/ pin their behaviour)."""

_LIVE = sql.SQL(
    "f.dataset = %(dataset)s AND f.project = %(project)s AND f.valid_at <= %(at)s"
    " AND (f.invalid_at IS NULL OR f.invalid_at > %(at)s) AND f.confidence >= %(min_confidence)s"
)
_ANY = sql.SQL("f.dataset = %(dataset)s AND f.project = %(project)s")

_UNFILTERED_VECTOR = """
    vector_hits AS (
        SELECT id AS fact_id, row_number() OVER (ORDER BY distance, id DESC) AS rank
        FROM (SELECT f.id, f.embedding <=> %(qvec)s AS distance FROM {s}.facts f
              WHERE {where} ORDER BY f.embedding <=> %(qvec)s LIMIT %(vector_candidates)s) v)"""


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One way of running the signals: recall options, keyword form, and the validity filter."""

    options: RecallOptions
    keyword: KeywordForm = KeywordForm.OR_HALF
    validity: bool = True


UNCAPPED = MAX_OPTION_INT
"""An `anchor.bridge_max_facts` that never binds (the core before the cap existed): no entity
touches more facts than PostgreSQL's integer counts."""


def _keyword(schema: str, form: KeywordForm, *, live: bool) -> sql.Composable:
    hubs = sql.SQL(HUB_TERMS)
    if form is KeywordForm.OR_HALF and live:
        return keyword_ctes(schema)
    if form is KeywordForm.HALF_TS_RANK:
        return sql.SQL(_HALF_TS_RANK).format(s=sql.Identifier(schema), where=_LIVE if live else _ANY, hub_terms=hubs)
    if form is KeywordForm.OR_HALF:
        return sql.SQL(_HALF).format(s=sql.Identifier(schema), where=_LIVE if live else _ANY, hub_terms=hubs)
    hits = sql.SQL(_KEYWORD_HITS).format(s=sql.Identifier(schema), where=_LIVE if live else _ANY)
    query = _KEYWORD_QUERY[KeywordForm.OR_WITH_HUBS if form is KeywordForm.OR else form]  # the same SQL
    return sql.Composed([sql.SQL(query).format(hub_terms=hubs), hits])


def statement(schema: str, variant: Variant, signals: Sequence[str] = ("vector", "anchor", "keyword")) -> sql.Composed:
    """The chosen signals of `variant` in one statement returning (signal, fact_id, rank).
    Without validity there is no anchor signal (only vector and keyword). The vector list is read
    as a small scope's recall reads it (`signals.live`): the quality bench's scopes are small."""
    s = sql.Identifier(schema)
    ctes: list[sql.Composable] = []
    chosen = [name for name in signals if variant.validity or name != "anchor"]
    plan = RecallPlan(query=True, embedding=True, hops=variant.options.anchor.hops)
    if "anchor" in signals or "keyword" in signals:
        ctes += [hub_floor_cte(schema), named_cte(schema)]
    if "vector" in chosen and variant.validity:
        # as a small scope's recall reads it: its live facts nearest first, a tie at the cut by id
        ctes += [*live_cte(schema, replace(plan, exact=True), SHARED), sql.SQL(LIVE_NEAREST)]
    elif "vector" in chosen:
        ctes.append(sql.SQL(_UNFILTERED_VECTOR).format(s=s, where=_ANY))
    if "anchor" in chosen:
        ctes += [near_cte(schema), anchor_ctes(schema, plan)]
    if "keyword" in chosen:
        ctes.append(_keyword(schema, variant.keyword, live=variant.validity))
    hits = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {name}::text, fact_id, rank FROM {table}").format(
            name=sql.Literal(name), table=sql.Identifier(f"{name}_hits")
        )
        for name in chosen
    )
    return sql.Composed(
        [sql.SQL("WITH"), sql.SQL(",").join(ctes), sql.SQL(" SELECT * FROM ({}) h ORDER BY 1, 3").format(hits)]
    )


def params(
    *,
    scope: Scope,
    query: str,
    embedding: Sequence[float],
    at: datetime,
    options: RecallOptions,
    tsconfig: str,
) -> dict[str, Any]:
    """memsoda's own statement parameters, plus the raw query for `plainto_tsquery`."""
    bound = statement_params(
        RecallRequest(
            scope=scope, query=query, embedding=embedding, at=at, options=options, text_search_config=tsconfig
        )
    )
    bound["raw_query"] = normalize_query(query)
    bound["half_max_lexemes"] = 10  # the pre-issue-20 keyword form's (`_HALF_TS_RANK`)
    bound["keyword_pool"] = 4 * options.keyword.candidates
    return bound


def lists_from_rows(rows: Sequence[Sequence[Any]]) -> dict[str, list[int]]:
    """signal -> fact ids, best first."""
    lists: dict[str, list[tuple[int, int]]] = {}
    for signal, fact_id, rank in rows:
        lists.setdefault(str(signal), []).append((int(rank), int(fact_id)))
    return {signal: [fid for _, fid in sorted(entries)] for signal, entries in lists.items()}


def physical_order(ids: Sequence[int], limit: int) -> list[int]:
    """The anchor list as a statement without ORDER BY returns it on a freshly loaded table:
    insertion (id) order, cut at the list length."""
    return sorted(ids)[:limit]


def fuse(
    lists: Mapping[str, Sequence[int]], signals: Sequence[str], *, k: int, recency: Mapping[int, float], top: int
) -> list[int]:
    """RRF over the chosen signals' lists; the top `top` fact ids."""
    chosen = {name: lists.get(name, []) for name in signals}
    return [entry.fact_id for entry in rrf(chosen, k=k, tiebreak=recency)][:top]


RECENT_AMONG = 30
"""How many of the vector list's nearest facts the bench-only "recent among the nearest" list
reorders by time."""


def recent_among(lists: Mapping[str, Sequence[int]], recency: Mapping[int, float], n: int = RECENT_AMONG) -> list[int]:
    """Bench-only list: the vector list's `n` nearest facts, latest first (ties: larger id). A
    recency list that depends on the query, unlike the plain recency list (`recent.candidates`)."""
    return sorted(lists.get("vector", [])[:n], key=lambda i: (-recency.get(i, float("-inf")), -i))


def resolved(conn: Any, schema: str, scope: Scope, options: RecallOptions) -> tuple[RecallOptions, FusionChoice | None]:
    """`options` with what they leave to the memory chosen as `Memory.recall` chooses it: the
    scope's statistics (`recall.scope_stats`, read now) through `recall.adaptive.choose`."""
    if not options.left_to_memory():
        return options, None
    params = {"dataset": scope.dataset, "project": scope.project, "sample_facts": SAMPLE_FACTS}
    with conn.cursor(row_factory=class_row(LatestFact)) as cursor:
        rows = cursor.execute(sample_statement(schema), params).fetchall()
    return choose(options, sample_of(rows).stats)


def drop_unchosen(lists: dict[str, list[int]], options: RecallOptions) -> dict[str, list[int]]:
    """The lists a recall with `options` fuses among the bench's: the recency list only when
    `recent.candidates` asks for it (the bench computes it for every config)."""
    return lists if options.recent.candidates else {name: ids for name, ids in lists.items() if name != "recent"}
