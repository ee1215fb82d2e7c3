"""The keyword signal: full-text search over the facts for the query's terms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.option_checks import check_between, check_not_negative, check_share, check_types
from memsoda_core.recall.fragments import fragment
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.signals.entities import HUB_TERMS, NAMED_ENTITIES, SCOPE_FACTS
from memsoda_core.recall.signals.live import LIVE_FACTS, reads_live
from memsoda_core.recall.signals.spec import RecallPlan, RecallRequest, SignalSpec
from memsoda_core.store.params import TextArray
from memsoda_core.text import normalized_terms

_POOL = """
    keyword_pool AS (
        SELECT f.id, f.valid_at, f.tsv, m.score
        FROM keyword_any ka
        JOIN {facts} f ON {index_where_f} AND f.tsv @@ ka.q_any AND f.tsv @@ ka.q
        CROSS JOIN LATERAL (SELECT count(*) AS n, sum(u.idf) AS score
                            FROM unnest(ka.qs, ka.idfs) AS u(q, idf) WHERE f.tsv @@ u.q) m
        CROSS JOIN LATERAL (SELECT count(*) AS n FROM unnest(ka.hub_qs) AS h(q) WHERE f.tsv @@ h.q) h
        WHERE m.n + h.n >= ka.m),
    keyword_ranked AS (
        SELECT id, valid_at, tsv, row_number() OVER (ORDER BY score DESC, valid_at DESC, id DESC) AS rank
        FROM keyword_pool
        ORDER BY rank
        LIMIT %(keyword_candidates)s),
    keyword_hits AS (
        SELECT r.id AS fact_id, r.valid_at, r.rank,
               (SELECT array_agg(u.term) FROM unnest(ka.qs || ka.hub_qs, ka.terms || ka.hub_names) AS u(q, term)
                WHERE r.tsv @@ u.q) AS matched
        FROM keyword_ranked r CROSS JOIN keyword_any ka
        ORDER BY r.rank)"""
"""The pool, its first %(keyword_candidates)s by IDF sum, then recency and id, and the matched terms
of those kept (see `keyword_ctes`)."""

_LIVE_POOL = """
    keyword_term_qs AS MATERIALIZED (
        SELECT u.i, u.q, u.idf, u.term
        FROM keyword_any ka
        CROSS JOIN LATERAL unnest(ka.qs || ka.hub_qs, ka.idfs, ka.terms || ka.hub_names)
                           WITH ORDINALITY AS u(q, idf, term, i)),
    keyword_pool AS MATERIALIZED (
        SELECT f.id, f.valid_at, sum(u.idf) AS score, array_agg(u.term ORDER BY u.i) AS matched
        FROM keyword_any ka
        JOIN live f ON f.tsv @@ ka.q_any AND f.tsv @@ ka.q
        JOIN keyword_term_qs u ON f.tsv @@ u.q
        GROUP BY f.id, f.valid_at, ka.m
        HAVING count(*) >= ka.m),
    keyword_hits AS MATERIALIZED (
        SELECT id AS fact_id, valid_at, matched,
               row_number() OVER (ORDER BY score DESC, valid_at DESC, id DESC) AS rank
        FROM keyword_pool
        ORDER BY rank
        LIMIT %(keyword_candidates)s)"""
"""`_POOL` over the scope's live facts (`signals.live`): the query's terms (its lexemes, then the
named hubs', which have no IDF: `unnest` pads the IDFs with NULLs) listed once, and each pool fact
joined to those it holds, so a fact's count (lexemes and hubs), IDF sum and matched terms (in the
terms' order) come from one test of each term. A fact holding none is not in the join, where the
rule's count (at least 1) would drop it anyway. A scope searched exactly has few pool facts, so
listing every one's terms costs less than testing the kept ones again, and the pool carries no
`tsv` through its sort (bench/RESULTS.md, "One scan of a small scope"). Its hits are the pool's
first ranks as they are, in one CTE, and each CTE is planned apart (`live.once`)."""


_SCOPE = "(SELECT {scope_facts} AS n)"
"""The scope's fact count (`n`), for `keyword_scope`."""

_LIVE_SCOPE = "(SELECT facts AS n FROM hub_floor)"
"""`_SCOPE` in a scope searched exactly: as `hub_floor` read it for the hub floor
(`entities.hub_floor_cte`), the scopes row looked up once in the statement."""


def keyword_ctes(
    schema: str, access: ScopeAccess = SHARED, *, known: bool = False, live: bool = False, within: bool = False
) -> sql.Composed:
    """Full-text search for the query's lexemes (its terms stemmed by the store's config), minus the
    terms of any hub named in the query (a match on nothing but a hub's name is noise) and the terms
    too common in the scope (`keyword.common_term_share`). Of the n lexemes left, a fact must
    hold min(ceil(n/2), `keyword.min_terms`), ranked by the summed BM25 IDF of those it holds (from
    the scope's per-lexeme fact counts, `lexemes`).

    A hub the query names (`keyword_hubs`) counts as one held term for a fact holding its whole
    name, but only toward that count, and only beside a lexeme of the query's own: the query asks
    about that person or thing, so a fact about it that shares one of the query's other words is
    the fact asked for as much as one sharing two of them ("where is Melanie going camping next":
    "Melanie is planning to camp at ..."), while the name alone still places nothing, and the hub
    adds nothing to the rank (it is in a fifth or more of the scope's facts). n and the rule's count
    are those of the other lexemes, so the hub never makes the rule stricter. A hub linked to more
    facts than the common-term bound allows is left out like any common term.

    A small fixed number rather than half the query, so a long message still finds notes sharing two
    of its words while one common word alone places nothing; IDF, because a rare shared word says
    which fact is meant and a frequent one does not (`ts_rank` has no IDF). The GIN index answers the
    rule's necessary part in one tsquery (`keyword_any.q`: any lexeme, or any pair, or any lexeme
    with a named hub), so only those facts are scored. A scope searched without that index tests
    each live fact: there the pairs (n(n-1)/2 of them) cost more than the facts' other tests
    together for a long query (a `remember` window's user turns), so `q_any` (any lexeme, implied
    by `q`: the result is the same) is tested first and turns most facts away in n lookups
    (bench/RESULTS.md section 8). With `live` (a scope searched exactly) the pool is drawn from the
    scope's live facts as read once for every signal (`signals.live`). With `within`, the pool is
    drawn from the facts %(within)s only; the IDFs and the common-term bound stay the scope's.

    The scope's size and the common-term bound (`keyword_scope`), the terms and the hubs are
    MATERIALIZED CTEs, so each lookup and the tsquery are built once; each lexeme's count sits
    behind `OFFSET 0` (pulled up, its lookup ran once per reference to it: four times a lexeme).
    Every pool fact is scored by its count and IDF sum alone; its matched terms are listed only for
    the facts kept. The term array is read through a subquery so the
    planner's estimate, and a small scope's generic plan, do not depend on the query's terms
    (bench/RESULTS.md, "Keyword signal")."""
    scope = _LIVE_SCOPE if live else _SCOPE
    return fragment(
        """
    keyword_scope AS MATERIALIZED (
        SELECT sc.n, greatest(%(common_term_min_facts)s, %(common_term_share)s * sc.n) AS common
        FROM {scope} sc),
    keyword_terms AS MATERIALIZED (
        SELECT quote_literal(x.lexeme) AS lexeme, min(t.i) AS i, (array_agg(t.term ORDER BY t.i))[1] AS term,
               ln(1 + (greatest(min(sc.n), min(l.n)) - min(l.n) + 0.5) / (min(l.n) + 0.5)) AS idf
        FROM unnest((SELECT %(terms)b::text[])) WITH ORDINALITY AS t(term, i)
        CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector(%(tsconfig)s::regconfig, t.term))) AS x(lexeme)
        CROSS JOIN LATERAL (SELECT coalesce((SELECT l.facts FROM {lexemes} l
                                             WHERE {scope_l} AND l.lexeme = x.lexeme), 0) AS n OFFSET 0) l
        CROSS JOIN keyword_scope sc
        WHERE t.term NOT IN {hub_terms} AND l.n <= sc.common
        GROUP BY 1),
    keyword_hubs AS MATERIALIZED (
        SELECT h.name, h.q
        FROM (SELECT n.name, n.fact_count, plainto_tsquery(%(tsconfig)s::regconfig, n.name) AS q
              FROM named n WHERE n.is_hub) h
        CROSS JOIN keyword_scope sc
        WHERE numnode(h.q) > 0 AND h.fact_count <= sc.common),
    keyword_any AS MATERIALIZED (
        SELECT least((count(*) + 1) / 2, %(keyword_min_terms)s) AS m,
               coalesce(CASE WHEN least((count(*) + 1) / 2, %(keyword_min_terms)s) < 2
                             THEN string_agg(lexeme, ' | ')
                             ELSE concat_ws(' | ',
                                  (SELECT string_agg(a.lexeme||' & '||b.lexeme, ' | ')
                                   FROM keyword_terms a JOIN keyword_terms b ON a.lexeme < b.lexeme),
                                  '('||string_agg(lexeme, ' | ')||') & ('||
                                  (SELECT string_agg('('||h.q::text||')', ' | ') FROM keyword_hubs h)||')') END,
                        '')::tsquery AS q,
               coalesce(string_agg(lexeme, ' | '), '')::tsquery AS q_any,
               array_agg(lexeme::tsquery ORDER BY i) AS qs, array_agg(idf ORDER BY i) AS idfs,
               array_agg(term ORDER BY i) AS terms,
               (SELECT array_agg(h.q ORDER BY h.name) FROM keyword_hubs h) AS hub_qs,
               (SELECT array_agg(h.name ORDER BY h.name) FROM keyword_hubs h) AS hub_names
        FROM keyword_terms),{pool}""",
        schema,
        access=access,
        known=known,
        hub_terms=sql.SQL(HUB_TERMS),
        pool=(sql.SQL(_LIVE_POOL) if live else fragment(_POOL, schema, access=access, known=known, within=within)),
        scope=fragment(scope, schema, access=access, scope_facts=fragment(SCOPE_FACTS, schema, access=access)),
    )


def _ctes(schema: str, plan: RecallPlan, access: ScopeAccess) -> Sequence[sql.Composable]:
    return (keyword_ctes(schema, access, known=plan.known, live=reads_live(plan), within=plan.within),)


@dataclass(frozen=True, kw_only=True)
class KeywordOptions:
    """The keyword signal's knobs (`RecallOptions.keyword`)."""

    group: ClassVar[str] = "keyword"
    candidates: int = 50
    """Length of the keyword signal's list."""
    min_terms: int | None = None
    """A keyword hit holds min(ceil(n/2), this) of the query's n search lexemes: a small fixed
    number, so a long message still finds the notes that share two of its rarer words, while one
    common word alone places nothing. 64 (the most terms a query has) matches like the half rule that
    was the default before (ranked by IDF, not ts_rank). None (the default): the memory chooses, 2
    or 1 (`GENERAL_OPTIONS`, `FIRST_PERSON_OPTIONS`; see `recall.adaptive`)."""
    common_term_share: float = 0.05
    """A query term in more than this share of the scope's facts ..."""
    common_term_min_facts: int = 1_000
    """... and in more than this many of them is left out of the keyword search: it says little about
    which fact is meant and is slow to rank (bench/RESULTS.md, "Keyword signal")."""

    def __post_init__(self) -> None:
        check_types(self, self.group)
        check_between("keyword.candidates", self.candidates, 1, 1000)
        check_between("keyword.min_terms", self.min_terms, 1, 64)
        check_share("keyword.common_term_share", self.common_term_share)
        check_not_negative("keyword.common_term_min_facts", self.common_term_min_facts)


def _params(inputs: RecallRequest) -> Mapping[str, Any]:
    options = inputs.options.keyword
    return {
        "terms": TextArray(normalized_terms(inputs.normalized)),
        "tsconfig": inputs.text_search_config,
        "common_term_min_facts": options.common_term_min_facts,
        "common_term_share": options.common_term_share,
        "keyword_candidates": options.candidates,
        "keyword_min_terms": options.min_terms,
    }


def _explain(hit: HitRow) -> str:
    return "matched terms: " + ", ".join(hit.matched or ())


SIGNAL = SignalSpec(
    name="keyword",
    statement=0,
    runs=lambda request: request.query is not None,
    ctes=_ctes,
    details=(("matched", "matched"),),
    params=_params,
    explain=_explain,
    requires=(LIVE_FACTS, NAMED_ENTITIES),
)
