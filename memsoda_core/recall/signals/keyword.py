"""The keyword signal: full-text search over the facts for the query's terms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import sql

from memsoda_core.recall.fragments import fragment
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.signals.entities import NAMED_ENTITIES
from memsoda_core.recall.signals.spec import RecallPlan, SignalInputs, SignalSpec
from memsoda_core.store.params import TextArray
from memsoda_core.text import normalized_terms
from memsoda_core.validation import Scope

HALF_RULE_MAX_LEXEMES = 10
"""Up to this many query lexemes, the half rule is one tsquery the GIN index answers: an OR of every
conjunction of ceil(n/2) lexemes (at most C(10,5) = 252), so only facts that pass it are fetched
and ranked. Longer queries fall back to ranking the OR matches and keeping the best
`keyword_pool` of them before the rule is checked."""

POOL_PER_CANDIDATE = 4
"""Facts ranked (`keyword_pool`) per fact kept (`keyword_candidates`) when the half rule is
checked after ranking (queries of more than `HALF_RULE_MAX_LEXEMES` lexemes)."""


def keyword_ctes(schema: str, indexed: Scope | None = None) -> sql.Composed:
    """Full-text search: an OR of the query's terms (stemmed by the store's config), minus the terms
    of any hub named in the query (a match on nothing but a hub's name is noise) and the terms too
    common in the scope (`RecallOptions.common_term_share`), keeping facts that
    match at least half of the query's remaining lexemes (stopwords do not count), ranked by ts_rank.

    Plain OR let one common word ("drink", "group", "keep") put junk at keyword rank 1, which RRF
    weighs like vector rank 1; the half rule lifted all-query MRR from 0.69 to 0.74 (persona) and
    0.68 to 0.71 (chat) in bench/RESULTS.md, while still finding 94-96% of exact-term answers alone.
    AND (plainto_tsquery) lost half of them. The rule is written as a tsquery (`keyword_half`), so
    its cost follows the facts that pass it, not every fact one common word matches. It is a
    MATERIALIZED CTE so it is built once: inlined, the planner folded it into the row filter of a
    tenant without a GIN index and rebuilt it for every candidate (1,000 facts: 6.9 -> 1.4 ms)."""
    return fragment(
        """
    keyword_query AS (
        SELECT to_tsquery(%(tsconfig)s::regconfig, coalesce(string_agg(t.term, ' | '), '')) AS q,
               coalesce(array_agg(t.term), ARRAY[]::text[]) AS terms,
               coalesce(array_agg(to_tsquery(%(tsconfig)s::regconfig, t.term)), ARRAY[]::tsquery[]) AS term_queries,
               tsvector_to_array(to_tsvector(%(tsconfig)s::regconfig,
                                             coalesce(string_agg(t.term, ' '), ''))) AS lexemes
        FROM unnest(%(terms)b::text[]) AS t(term)
        WHERE t.term NOT IN (SELECT string_to_table(terms, ' ') FROM named WHERE is_hub)
          AND NOT EXISTS (
              SELECT FROM unnest(tsvector_to_array(to_tsvector(%(tsconfig)s::regconfig, t.term))) AS x(lexeme)
              CROSS JOIN LATERAL (SELECT l.facts FROM {s}.lexemes l
                                  WHERE {scope_l} AND l.lexeme = x.lexeme OFFSET 0) l
              JOIN {s}.scopes sc ON {scope_sc}
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
        JOIN {s}.facts f ON {index_where_f} AND f.tsv @@ kh.q
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
        LIMIT %(keyword_candidates)s)""",
        schema,
        indexed=indexed,
    )


def _ctes(schema: str, plan: RecallPlan, indexed: Scope | None) -> Sequence[sql.Composable]:
    return (keyword_ctes(schema, indexed),)


def _params(inputs: SignalInputs) -> Mapping[str, Any]:
    options = inputs.options
    return {
        "terms": TextArray(normalized_terms(inputs.normalized)),
        "tsconfig": inputs.text_search_config,
        "common_term_min_facts": options.common_term_min_facts,
        "common_term_share": options.common_term_share,
        "keyword_candidates": options.keyword_candidates,
        "keyword_pool": options.keyword_candidates * POOL_PER_CANDIDATE,
        "half_max_lexemes": HALF_RULE_MAX_LEXEMES,
    }


def _explain(hit: HitRow) -> str:
    return "matched terms: " + ", ".join(hit.matched or ())


SIGNAL = SignalSpec(
    name="keyword",
    statement=0,
    runs=lambda plan: plan.query,
    ctes=_ctes,
    details=(("matched", "matched"),),
    params=_params,
    explain=_explain,
    requires=(NAMED_ENTITIES,),
)
