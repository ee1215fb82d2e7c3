"""The entities the query names, and the fact count from which an entity is a hub: read by the
anchor signal (its named anchors) and the keyword signal (a hub's name is not a search term, only
a term a fact may hold besides one)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.option_checks import check_not_negative, check_share, check_types
from memsoda_core.recall.fragments import fragment
from memsoda_core.recall.signals.live import once, reads_live
from memsoda_core.recall.signals.spec import RecallRequest, SharedCtes
from memsoda_core.store.params import TextArray
from memsoda_core.text import name_spans_with_terms


def real_name(column: str) -> str:
    """SQL: the name in `column` can name something: it holds a lexeme of two or more characters in
    the store's text search config (in a tsvector's text every lexeme is quoted), or a symbol other
    than an apostrophe ("c++", "node.js", "50%", "_"). Stopwords ("the"), contraction pieces ("i'm",
    "don't") and one-letter tokens are neither: as anchors or bridges they matched a query's filler
    words and linked facts sharing nothing else. (tsconfig is bound untyped: PostgreSQL reads it as
    the regconfig `to_tsvector` takes.)"""
    return f"(to_tsvector(%(tsconfig)s, {column})::text ~ '''\\w\\w' OR {column} ~ '[^\\w\\s''’]|_')"


def name_like(schema: str, access: ScopeAccess = SHARED) -> sql.Composed:
    """The entity of a `named` row is used as a name in the scope: a one-word name is linked to at
    least %(anchor_name_share)s of the facts whose text holds its word (the scope's lexeme counts; a
    word never counted passes). A longer name passes: the count of its rarest word is only a bound
    on the facts holding the whole name, loose where other names share its words ("Anna Smith",
    "Eva Smith")."""
    return fragment(
        "(name ~ ' ' OR fact_count >= %(anchor_name_share)s * coalesce((SELECT min(l.facts) FROM {lexemes} l"
        " WHERE {scope_l} AND l.lexeme = ANY(tsvector_to_array(to_tsvector(%(tsconfig)s, name)))), 0))",
        schema,
        access=access,
    )


HUB_TERMS = (
    "(SELECT string_to_table(s.terms, ' ') FROM unnest(%(spans)b::text[], %(span_terms)b::text[]) AS s(span, terms)"
    " JOIN named n ON n.name = s.span WHERE n.is_hub)"
)
"""SQL: the search terms of the hubs the query names (the keyword signal leaves them out of its
search terms and counts each named hub apart, `keyword.keyword_ctes`)."""


SCOPE_FACTS = "coalesce((SELECT sc.fact_count FROM {scopes} sc WHERE {scope_sc}), 0)"
"""SQL template (`fragments.fragment`): the scope's fact count, 0 before its first write."""


def hub_floor_cte(schema: str, access: ScopeAccess = SHARED, *, exact: bool = False) -> sql.Composed:
    """The fact count from which an entity is a hub in this scope (`n`); with `exact` (a scope
    searched exactly), planned apart (`live.once`), and the scope's fact count beside it (`facts`),
    read once for the keyword signal too (`keyword.keyword_ctes`; behind `OFFSET 0`, as pulled up
    the lookup ran once per reference to it)."""
    scope_facts = fragment(SCOPE_FACTS, schema, access=access)
    if not exact:
        return fragment(
            """
    hub_floor AS (
        SELECT greatest(%(hub_min_facts)s::bigint, ceil(%(hub_min_share)s::float8*{scope_facts}))::bigint AS n)""",
            schema,
            access=access,
            scope_facts=scope_facts,
        )
    return fragment(
        """
    hub_floor AS MATERIALIZED (
        SELECT greatest(%(hub_min_facts)s::bigint, ceil(%(hub_min_share)s::float8*sc.facts))::bigint AS n, sc.facts
        FROM (SELECT {scope_facts} AS facts
              OFFSET 0) sc)""",
        schema,
        access=access,
        scope_facts=scope_facts,
    )


def named_cte(schema: str, access: ScopeAccess = SHARED, *, exact: bool = False) -> sql.Composed:
    """Entities whose whole normalized name equals a span of the query (word-boundary match),
    each looked up by name (behind `OFFSET 0`, so a generic plan cannot scan the scope's entities
    instead: see `anchor.anchor_ctes`). With `exact` (a scope searched exactly, `RecallPlan.exact`:
    its entities are few, and its statement and plan are shared by every such scope), all spans
    in one index scan, `name = ANY(spans)`, which costs less than a lookup per span (bench/RESULTS.md,
    "One scan of a small scope"). The spans are read through a subquery, so the planner does not
    estimate each against the names' statistics (planning paid at every call on a Citus worker:
    bench/RESULTS.md, "Planning a small scope's statement")."""
    lookup = (
        "FROM {entities} e WHERE {scope_e} AND e.name = ANY((SELECT %(spans)b::text[])::text[])"
        if exact
        else """FROM unnest(%(spans)b::text[]) AS s(span)
        CROSS JOIN LATERAL(SELECT id,name,fact_count FROM {entities} e
                            WHERE {scope_e} AND e.name=s.span OFFSET 0) e"""
    )
    return fragment(
        """
    named AS{once} (
        SELECT e.id,e.name,e.fact_count,e.fact_count>=(SELECT n FROM hub_floor) AS is_hub
        {lookup})""",
        schema,
        access=access,
        lookup=fragment(lookup, schema, access=access),
        once=once(exact),
    )


@dataclass(frozen=True, kw_only=True)
class EntitiesOptions:
    """When an entity is a hub (`RecallOptions.entities`): read by the anchor signal (hubs are never
    anchors or bridges) and the keyword signal (a hub's name is not a search term)."""

    group: ClassVar[str] = "entities"
    hub_min_share: float = 0.2
    """An entity touching at least this share of the scope's facts is a hub ..."""
    hub_min_facts: int = 10
    """... provided it touches at least this many facts."""

    def __post_init__(self) -> None:
        check_types(self, self.group)
        check_share("entities.hub_min_share", self.hub_min_share)
        check_not_negative("entities.hub_min_facts", self.hub_min_facts)


def _params(inputs: RecallRequest) -> Mapping[str, Any]:
    spans = name_spans_with_terms(inputs.normalized)
    options = inputs.options.entities
    return {
        "spans": TextArray(spans),
        "span_terms": TextArray(spans.values()),
        "hub_min_facts": options.hub_min_facts,
        "hub_min_share": options.hub_min_share,
        "tsconfig": inputs.text_search_config,
    }


NAMED_ENTITIES = SharedCtes(
    name="named entities",
    ctes=lambda schema, plan, access: (
        hub_floor_cte(schema, access, exact=reads_live(plan)),
        named_cte(schema, access, exact=reads_live(plan)),
    ),
    params=_params,
)
