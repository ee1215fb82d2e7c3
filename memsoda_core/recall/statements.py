"""SQL builders of recall: one fragment per signal, assembled into two independent statements
(vector + keyword, anchor) that can run at once, then one that reads the facts fusion kept.

Every fragment carries the tenant, liveness and confidence predicates itself, so no signal ever
ranks a row that a later filter would drop. A statement returns one row per (signal, fact) hit;
ranks are 1-based and ties are broken by recency, then id, so the same data and query always give
the same lists.

Parameters (all bound): dataset, project, at, min_confidence, qvec (only with an embedding), spans,
span_terms, terms, tsconfig, hub_min_facts, hub_min_share, common_min_facts, common_share, near_k,
near_min, and the per-signal limits vector_limit, anchor_limit, anchor_max_facts, keyword_limit,
keyword_pool, half_max_lexemes, recent_limit and bridge_max_facts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from psycopg import sql

from memsoda_core.store.statements import fact_columns
from memsoda_core.store.tenant_index import scope_predicate, table_alias
from memsoda_core.validation import Scope


def _where(alias: str, *, live: bool = True, named: Scope | None = None) -> sql.Composed:
    """Tenant predicate on `alias` (the scope's names as literals when `named`, else bound); with
    `live`, also valid at %(at)s and above the confidence floor."""
    a = table_alias(alias)
    if named is None:
        scope = sql.SQL("{a}.dataset = %(dataset)s AND {a}.project = %(project)s").format(a=a)
    else:
        scope = scope_predicate(named, alias)
    if not live:
        return scope
    return sql.SQL(
        "{scope} AND {a}.valid_at <= %(at)s AND ({a}.invalid_at IS NULL OR {a}.invalid_at > %(at)s)"
        " AND {a}.confidence >= %(min_confidence)s"
    ).format(scope=scope, a=a)


@dataclass(frozen=True, kw_only=True)
class RecallPlan:
    """Which fragments a recall statement holds."""

    vector: bool
    """There is a query embedding: run the vector signal and the near-entity anchors."""
    anchor: bool
    keyword: bool
    recent: bool
    """Add the recency list (no query, or degraded without an embedding)."""
    hops: int = 2


_PREDICATES: dict[str, sql.Composable] = {
    "where_f": _where("f"),
    **{"scope_" + alias: _where(alias, live=False) for alias in ("sc", "e", "fe", "b", "f", "a", "l")},
}


def _fragment(template: str, schema: str, *, indexed: Scope | None = None, **parts: sql.Composable) -> sql.Composed:
    """`template` with {s} the schema, {where_f} the full predicate on facts `f`, {scope_x} the
    tenant predicate on alias x, and `parts`. {index_where_f} and {index_scope_e} are the
    predicates a scope's partial indexes must match: the scope's names as literals when
    `indexed` is given (see `recall_statements`), else the bound ones."""
    predicates = {
        **_PREDICATES,
        "index_where_f": _where("f", named=indexed),
        "index_scope_e": _where("e", live=False, named=indexed),
    }
    used = {key: value for key, value in predicates.items() if "{" + key + "}" in template}
    return sql.SQL(template).format(s=sql.Identifier(schema), **used, **parts)


def hub_floor_cte(schema: str) -> sql.Composed:
    """The fact count from which an entity is a hub in this scope."""
    return _fragment(
        """
    hub_floor AS (
        SELECT greatest(%(hub_min_facts)s::bigint,
                        ceil(%(hub_min_share)s::float8 * coalesce(
                            (SELECT sc.fact_count FROM {s}.scopes sc WHERE {scope_sc}), 0))
                       )::bigint AS n)""",
        schema,
    )


def named_cte(schema: str) -> sql.Composed:
    """Entities whose whole normalized name equals a span of the query (word-boundary match),
    each looked up by name (behind `OFFSET 0`, so a generic plan cannot scan the scope's entities
    instead: see `anchor_ctes`)."""
    return _fragment(
        """
    named AS (
        SELECT e.id, e.name, e.fact_count >= (SELECT n FROM hub_floor) AS is_hub, s.terms
        FROM unnest(%(spans)b::text[], %(span_terms)b::text[]) AS s(span, terms)
        CROSS JOIN LATERAL (SELECT id, name, fact_count FROM {s}.entities e
                            WHERE {scope_e} AND e.name = s.span OFFSET 0) e)""",
        schema,
    )


def near_cte(schema: str, indexed: Scope | None = None) -> sql.Composed:
    """The query's nearest entities by name embedding, kept at or above the similarity floor."""
    return _fragment(
        """
    near AS (
        SELECT n.*, n.fact_count >= (SELECT n FROM hub_floor) AS is_hub
        FROM (SELECT e.id, e.name, e.fact_count, 1 - (e.embedding <=> %(qvec)s) AS similarity
              FROM {s}.entities e
              WHERE {index_scope_e}
              ORDER BY e.embedding <=> %(qvec)s
              LIMIT %(near_k)s) n
        WHERE n.similarity >= %(near_min)s)""",
        schema,
        indexed=indexed,
    )


_HOP2 = """
    bridges AS (
        SELECT DISTINCT fe.entity_id, b.name, b.fact_count
        FROM hop1 h
        JOIN {s}.fact_entities fe ON {scope_fe} AND fe.fact_id = h.fact_id
        JOIN {s}.entities b ON {scope_b} AND b.id = fe.entity_id
        WHERE (SELECT count(*) FROM hop1) < %(anchor_limit)s
          AND fe.entity_id NOT IN (SELECT id FROM anchors)
          AND b.fact_count < (SELECT n FROM hub_floor)
          AND b.fact_count <= %(bridge_max_facts)s),
    hop2 AS (
        SELECT t.*, f.distance, f.valid_at
        FROM (SELECT fe.fact_id, sum(1.0 / greatest(b.fact_count, 1)) AS matches, min(b.name) AS via
              FROM bridges b
              JOIN {s}.fact_entities fe ON {scope_fe} AND fe.entity_id = b.entity_id
              WHERE fe.fact_id NOT IN (SELECT fact_id FROM hop1_all)
              GROUP BY fe.fact_id) t
        CROSS JOIN LATERAL (SELECT {distance} AS distance, f.valid_at FROM {s}.facts f
                            WHERE {where_f} AND f.id = t.fact_id OFFSET 0) f),"""

_ANCHOR = """
    anchors AS (
        SELECT id, min(name) AS name, bool_or(named) AS named, max(similarity) AS similarity
        FROM (SELECT id, name, true AS named, NULL::float8 AS similarity FROM named WHERE NOT is_hub
              {near_union}) a
        GROUP BY id),
    hop1_all AS (
        SELECT DISTINCT fe.fact_id
        FROM anchors a
        CROSS JOIN LATERAL (SELECT fe.fact_id FROM {s}.fact_entities fe
                            WHERE {scope_fe} AND fe.entity_id = a.id OFFSET 0) fe),
    hop1 AS (
        SELECT t.*, f.distance, f.valid_at
        FROM (SELECT fe.fact_id, count(*)::numeric AS matches, min(a.name) AS via,
                     bool_or(a.named) AS via_named, max(a.similarity) AS via_similarity
              FROM anchors a
              CROSS JOIN LATERAL (SELECT fe.fact_id FROM {s}.fact_entities fe
                                  WHERE {scope_fe} AND fe.entity_id = a.id
                                  ORDER BY fe.fact_id DESC
                                  LIMIT %(anchor_max_facts)s) fe
              GROUP BY fe.fact_id) t
        CROSS JOIN LATERAL (SELECT {distance} AS distance, f.valid_at FROM {s}.facts f
                            WHERE {where_f} AND f.id = t.fact_id OFFSET 0) f),{hop2}
    anchor_hits AS (
        SELECT fact_id, hop, via, via_named, via_similarity, distance, valid_at,
               row_number() OVER (ORDER BY hop, matches DESC, distance NULLS LAST,
                                  valid_at DESC, fact_id DESC) AS rank
        FROM (SELECT fact_id, 1 AS hop, matches, via, via_named, via_similarity, distance, valid_at
              FROM hop1 {hop2_union}) x
        ORDER BY rank
        LIMIT %(anchor_limit)s)"""


def anchor_ctes(schema: str, plan: RecallPlan) -> sql.Composed:
    """Anchors (named + near, never hubs), the facts touching them (the `anchor_max_facts` most
    recently written per anchor), then the second hop through the other non-hub entities of those
    facts; ordered by relevance, never by physical row order.

    Hop-1 facts rank by how many anchors they touch, then by similarity to the query, recency, id.
    Hop-2 facts rank after all hop-1 facts, by the specificity of their bridges (the sum of
    1 / fact_count over the bridges they touch: a bridge shared by few facts says more than one
    shared by many), then the same tie-breaks. So when hop 1 alone fills the list
    (`anchor_limit` facts), no hop-2 fact could be kept and the second hop is not computed; when
    it runs, every hop-1 fact seeds it.

    Every link (`fact_entities`) and fact is read by a lookup of one anchor, fact or bridge, never
    by a join the planner may turn into a scan of the scope: `hop1_all` reads each anchor's links,
    and both hops each fact, in a LATERAL subquery behind `OFFSET 0`, which PostgreSQL does not
    flatten. As a plain join, the generic plan of a 100k-fact tenant merged the anchors with all
    172,823 of its links (28-48 ms, a tenth of the recalls; 4-6 ms with the fence), and on a store
    of many small scopes the facts were read by a scan of the scope."""
    distance = sql.SQL("f.embedding <=> %(qvec)s" if plan.vector else "NULL::float8")
    near_union = sql.SQL(
        "UNION ALL SELECT id, name, false, similarity FROM near WHERE NOT is_hub" if plan.vector else ""
    )
    two_hops = plan.hops >= 2
    hop2 = _fragment(_HOP2, schema, distance=distance) if two_hops else sql.SQL("")
    hop2_union = sql.SQL(
        "UNION ALL SELECT fact_id, 2, matches, via, NULL, NULL, distance, valid_at FROM hop2" if two_hops else ""
    )
    return _fragment(_ANCHOR, schema, distance=distance, near_union=near_union, hop2=hop2, hop2_union=hop2_union)


def vector_cte(schema: str, indexed: Scope | None = None) -> sql.Composed:
    """Cosine kNN over fact embeddings. The inner ORDER BY can use HNSW (with iterative scans the
    order is relaxed); the outer row_number re-sorts exactly and breaks ties by id."""
    return _fragment(
        """
    vector_hits AS (
        SELECT id AS fact_id, distance, valid_at,
               row_number() OVER (ORDER BY distance, id DESC) AS rank
        FROM (SELECT f.id, f.embedding <=> %(qvec)s AS distance, f.valid_at
              FROM {s}.facts f
              WHERE {index_where_f}
              ORDER BY f.embedding <=> %(qvec)s
              LIMIT %(vector_limit)s) v)""",
        schema,
        indexed=indexed,
    )


HALF_RULE_MAX_LEXEMES = 10
"""Up to this many query lexemes, the half rule is one tsquery the GIN index answers: an OR of every
conjunction of ceil(n/2) lexemes (at most C(10,5) = 252), so only facts that pass it are fetched
and ranked. Longer queries fall back to ranking the OR matches and keeping the best
`keyword_pool` of them before the rule is checked."""


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
    return _fragment(
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
              WHERE l.facts > greatest(%(common_min_facts)s, %(common_share)s * sc.fact_count))),
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
        LIMIT %(keyword_limit)s)""",
        schema,
        indexed=indexed,
    )


def recent_cte(schema: str) -> sql.Composed:
    """The most recent live facts: the no-query list, and the fallback when embedding failed."""
    return _fragment(
        """
    recent_hits AS (
        SELECT f.id AS fact_id, f.valid_at, row_number() OVER (ORDER BY f.valid_at DESC, f.id DESC) AS rank
        FROM {s}.facts f
        WHERE {where_f}
        ORDER BY f.valid_at DESC, f.id DESC
        LIMIT %(recent_limit)s)""",
        schema,
    )


_NO_DETAIL = "NULL::int, NULL::text, NULL::boolean, NULL::float8"


_HIT_ROWS = sql.SQL("SELECT {signal}, fact_id, rank, (extract(epoch FROM valid_at) * 1e6)::int8, {details} FROM {cte}")


def _hit_rows(signal: str, details: str, cte: str) -> sql.Composed:
    return _HIT_ROWS.format(signal=sql.Literal(signal), details=sql.SQL(details), cte=sql.Identifier(cte))


_HITS = {
    "vector": _hit_rows("vector", f"{_NO_DETAIL}, 1 - distance, NULL::text[]", "vector_hits"),
    "anchor": _hit_rows("anchor", "hop, via, via_named, via_similarity, 1 - distance, NULL::text[]", "anchor_hits"),
    "keyword": _hit_rows("keyword", f"{_NO_DETAIL}, NULL::float8, matched", "keyword_hits"),
    "recent": _hit_rows("recent", f"{_NO_DETAIL}, NULL::float8, NULL::text[]", "recent_hits"),
}
"""Every hit row: signal, fact_id, rank, valid_at as microseconds since the epoch (fusion's recency
tie-break: an integer decodes faster than a timestamp and compares the same), hop, via, via_named,
via_similarity, similarity, matched."""

STATEMENT_GROUPS: tuple[tuple[str, ...], ...] = (("vector", "keyword", "recent"), ("anchor",))
"""The signals each recall statement runs. The runner may execute the statements at once on two
connections: the anchor signal costs about as much as the other two together (bench/RESULTS.md),
so the two halves take about the same time, and a recall about half of their sum."""


def _signal_ctes(schema: str, plan: RecallPlan, signal: str, indexed: Scope | None) -> list[sql.Composable]:
    if signal == "vector":
        return [vector_cte(schema, indexed)]
    if signal == "anchor":
        anchors = anchor_ctes(schema, plan)
        return [near_cte(schema, indexed), anchors] if plan.vector else [anchors]
    if signal == "keyword":
        return [keyword_ctes(schema, indexed)]
    return [recent_cte(schema)]


def planned_signals(plan: RecallPlan) -> tuple[str, ...]:
    """The signals `plan` runs, in a fixed order."""
    wanted = {"vector": plan.vector, "anchor": plan.anchor, "keyword": plan.keyword, "recent": plan.recent}
    return tuple(name for name in ("vector", "anchor", "keyword", "recent") if wanted[name])


def hits_statement(
    schema: str, plan: RecallPlan, signals: tuple[str, ...], indexed: Scope | None = None
) -> sql.Composed:
    """One statement running `signals` of `plan`, returning their hit rows (see `_HITS`); with
    `indexed`, the predicates its partial indexes must match name that scope."""
    if not signals:
        raise ValueError("a recall statement needs at least one signal")
    ctes: list[sql.Composable] = []
    if "anchor" in signals or "keyword" in signals:
        ctes += [hub_floor_cte(schema), named_cte(schema)]
    for signal in signals:
        ctes += _signal_ctes(schema, plan, signal, indexed)
    hits = sql.SQL(" UNION ALL ").join(_HITS[name] for name in signals)
    return sql.Composed([sql.SQL("WITH"), sql.SQL(",").join(ctes), sql.SQL(" "), hits])


PARSE_CACHE_BYTES = 4096
"""psycopg caches the parsing of a statement's placeholders only up to this length
(`psycopg._queries.MAX_CACHED_STATEMENT_LENGTH`); a longer statement is parsed again on every call
(~0.8 ms here, twice per recall). Rendered recall statements stay under it for schema names of up
to 20 characters, and an indexed scope's own statements for dataset and project names of up to 40
characters each (a test checks); the default schema is "memsoda". Longer names still work, a
little slower."""


_QUOTED_OR_INDENT = re.compile(r"""("(?:[^"]|"")*"|'(?:[^']|'')*')|[ \t]*\n[ \t]*""")


def _render_token(match: re.Match[str]) -> str:
    quoted = match.group(1)
    return "\n" if quoted is None else quoted.replace("%", "%%")


def rendered(statement: sql.Composed) -> sql.SQL:
    """`statement` as plain SQL text, indentation dropped: composed once, not at every execution,
    and short enough for psycopg's parse cache. Lines are kept, so no token ever merges. Quoted
    names and literals (a schema, an indexed scope's names) are kept as they are, except that `%`
    is doubled: psycopg reads the text for placeholders, quotes included. So the text must be run
    with parameters (every recall statement is)."""
    return sql.SQL(_QUOTED_OR_INDENT.sub(_render_token, statement.as_string(None)))


@lru_cache(maxsize=1024)
def recall_statements(schema: str, plan: RecallPlan, indexed: Scope | None = None) -> tuple[sql.SQL, ...]:
    """The statements of a recall (one per non-empty group of `STATEMENT_GROUPS`), independent of
    each other, rendered. Memoized: a store asks for the same few (schema, plan) pairs every time.

    `indexed`: a scope with its own partial indexes. Its statements then name it, as literals, in
    the three predicates those indexes must match (facts' kNN and text match, entity names' kNN),
    so that a plan PostgreSQL keeps for the statement still uses them; every other value stays
    bound. This is the one place where values enter the SQL text (quoted by psycopg, as in the
    indexes' own DDL): a generic plan over bound tenant values cannot use a partial index, and
    planning each run cost a 10k-fact scope's statements 35-52% of their time."""
    planned = planned_signals(plan)
    if not planned:
        raise ValueError("a recall plan needs at least one signal")
    groups = (tuple(name for name in group if name in planned) for group in STATEMENT_GROUPS)
    return tuple(rendered(hits_statement(schema, plan, group, indexed)) for group in groups if group)


@lru_cache(maxsize=64)
def facts_statement(schema: str) -> sql.SQL:
    """The columns of the facts fusion kept (%(fact_ids)s), in the scope."""
    return rendered(
        _fragment(
            """SELECT {fact_columns}
           FROM {s}.facts f
           JOIN {s}.entities a ON {scope_a} AND a.id = f.anchor_id
           WHERE {scope_f} AND f.id = ANY(%(fact_ids)b::bigint[])""",
            schema,
            fact_columns=fact_columns(schema),
        )
    )


def episodes_statement(schema: str) -> sql.Composed:
    """Nearest episode summaries of the scope (one vector search)."""
    return sql.SQL(
        """SELECT id, thread_id, text, created_at, 1 - (embedding <=> %(qvec)s) AS similarity
           FROM {s}.episodes
           WHERE dataset = %(dataset)s AND project = %(project)s AND created_at <= %(at)s
           ORDER BY embedding <=> %(qvec)s, id DESC
           LIMIT %(episodes_k)s"""
    ).format(s=sql.Identifier(schema))


def recent_episodes_statement(schema: str) -> sql.Composed:
    return sql.SQL(
        """SELECT id, thread_id, text, created_at, NULL::float8 AS similarity
           FROM {s}.episodes
           WHERE dataset = %(dataset)s AND project = %(project)s AND created_at <= %(at)s
           ORDER BY created_at DESC, id DESC
           LIMIT %(episodes_k)s"""
    ).format(s=sql.Identifier(schema))
