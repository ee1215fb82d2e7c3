"""The anchor signal: facts touching the entities the query names or comes near, then one hop
further from the named ones through their other entities."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from psycopg import sql

from memsoda_core.errors import LimitError
from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.option_checks import check_between, check_cosine, check_not_negative, check_types
from memsoda_core.recall.fragments import fragment
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.signals.entities import NAMED_ENTITIES, name_like, real_name
from memsoda_core.recall.signals.live import LIVE_FACTS, once, reads_live
from memsoda_core.recall.signals.spec import RecallPlan, RecallRequest, SignalSpec

NEAR_MIN_POOL = 10
"""The fewest entities the gap rule judges a query against: among fewer, one step is wide against
the others by chance (the near entities of a scope of a handful of entities are none)."""


def near_cte(schema: str, access: ScopeAccess = SHARED, *, exact: bool = False) -> sql.Composed:
    """The query's near entities, hubs left out. With `anchor.vector_min`: the `anchor.vector_top_k`
    nearest by name embedding at or above it. Else the gap rule (`AnchorOptions.vector_gap`): the
    pool is the query's `anchor.vector_pool` nearest entities (s the similarity, r its rank, d the
    drop to the next, sp the pool's spread, m its size, at least `NEAR_MIN_POOL`); near are the
    entities ranked up to the last r <= `top_k` whose drop d exceeds `anchor.vector_gap` * sp. The
    cut is the same for any s' = a + b*s (b > 0), so no embedder's scale moves it. One index scan
    reads the pool; the rest is window arithmetic over its rows. With `exact` (a scope searched
    exactly), planned apart (`live.once`)."""
    return fragment(
        """
    near AS{once} (
        SELECT n.id, n.name, n.s
        FROM (
            SELECT p.id, p.name, p.fact_count, p.s, p.r,
                   max(p.r) FILTER (WHERE p.r <= %(anchor_vector_top_k)s
                                      AND (p.d > %(near_gap)s * p.sp AND p.m >= {min_pool}
                                           OR p.s >= %(anchor_vector_min)s)) OVER () AS cut
            FROM (
                SELECT c.id, c.name, c.fact_count, c.s,
                       rank() OVER w AS r,
                       c.s - lead(c.s) OVER w AS d,
                       max(c.s) OVER () - min(c.s) OVER () AS sp,
                       count(*) OVER () AS m
                FROM {pool} AS c
                WINDOW w AS (ORDER BY c.s DESC, c.id)
            ) AS p
        ) AS n
        WHERE n.r <= n.cut AND n.fact_count < (SELECT hub_floor.n FROM hub_floor))""",
        schema,
        access=access,
        min_pool=sql.Literal(NEAR_MIN_POOL),
        once=once(exact),
        pool=fragment(_EXACT_POOL if exact else _POOL, schema, access=access),
    )


_POOL = """(
                    SELECT e.id, e.name, e.fact_count, 1 - (e.embedding <=> %(qvec)s) AS s
                    FROM {entities} e
                    WHERE {index_scope_e}
                    ORDER BY e.embedding <=> %(qvec)s
                    LIMIT %(near_pool)s
                )"""
"""The query's %(near_pool)s nearest entities, by an index a scope of its own has."""

_EXACT_POOL = """(
                    SELECT p.id, p.name, p.fact_count, 1 - p.distance AS s
                    FROM (SELECT e.id, e.name, e.fact_count, e.embedding <=> %(qvec)s AS distance
                          FROM {entities} e
                          WHERE {index_scope_e}
                          ORDER BY distance
                          LIMIT %(near_pool)s) AS p
                )"""
"""`_POOL` in a scope searched exactly, each entity's distance computed once: written twice, as an
index's order wants it, both were computed for every entity of the scope."""


# Both hops' rows have the same columns, so that `anchor_hits` ranks them as one list; hop 2 has no
# anchor of its own, so its via_named and via_similarity are NULL. Hop 2 starts from the hop-1 facts
# of named anchors only: a near entity is the embedder's guess at what the query is about, and a hop
# from it would add the guess's neighbours too.
_HOP2 = """
    bridges AS{once} (
        SELECT DISTINCT fe.entity_id, b.name, b.fact_count
        FROM hop1 h
        JOIN {fact_entities} fe ON {scope_fe} AND fe.fact_id = h.fact_id
        JOIN {entities} b ON {scope_b} AND b.id = fe.entity_id
        WHERE h.via_named AND (SELECT count(*) FROM hop1) < %(anchor_candidates)s
          AND fe.entity_id NOT IN (SELECT id FROM anchors)
          AND b.fact_count < (SELECT n FROM hub_floor)
          AND b.fact_count <= %(bridge_max_facts)s AND {real}),
    hop2 AS{once} (
        SELECT t.fact_id, t.matches, t.via, t.via_named, t.via_similarity, f.distance, f.valid_at
        FROM (
            SELECT fe.fact_id, sum(1.0 / greatest(b.fact_count, 1)) AS matches, min(b.name) AS via,
                   NULL::bool AS via_named, NULL::float8 AS via_similarity
            FROM bridges b
            JOIN {fact_entities} fe ON {scope_fe} AND fe.entity_id = b.entity_id
            WHERE fe.fact_id NOT IN (SELECT fact_id FROM hop1)
            GROUP BY fe.fact_id
        ) AS t
        {hop_facts}),"""

_HOP_FACTS = """CROSS JOIN LATERAL (
            SELECT {distance} AS distance, f.valid_at
            FROM {facts} f
            WHERE {where_f} AND f.id = t.fact_id
            OFFSET 0
        ) AS f"""
"""Each hop's fact (live, with its distance to the query) looked up by id; in a scope searched
exactly, joined from its live facts instead (`signals.live`), read once for every signal."""

_HIT_COLUMNS = "fact_id, matches, via, via_named, via_similarity, distance, valid_at"
"""The columns of each hop's rows, in the order `anchor_hits` unites them."""

_ANCHOR = """
    anchors AS{once} (
        SELECT a.id, min(a.name) AS name, bool_or(a.named) AS named, max(a.similarity) AS similarity
        FROM (
            SELECT id, name, true AS named, NULL::float8 AS similarity
            FROM named
            WHERE NOT is_hub AND {name_like}
            {near_union}
        ) AS a
        GROUP BY a.id
        HAVING {real_anchor}),
    hop1 AS{once} (
        SELECT t.fact_id, t.matches, t.via, t.via_named, t.via_similarity, f.distance, f.valid_at
        FROM (
            SELECT fe.fact_id, count(*)::numeric AS matches, min(a.name) AS via,
                   bool_or(a.named) AS via_named, max(a.similarity) AS via_similarity
            FROM anchors a
            CROSS JOIN LATERAL (
                SELECT fe.fact_id
                FROM {fact_entities} fe
                WHERE {scope_fe} AND fe.entity_id = a.id{within_fe}
                ORDER BY fe.fact_id DESC
                LIMIT %(anchor_max_facts)s
            ) AS fe
            GROUP BY fe.fact_id
        ) AS t
        {hop_facts}),{hop2}
    anchor_hits AS{once} (
        SELECT x.hop, x.fact_id, x.matches, x.via, x.via_named, x.via_similarity, x.distance, x.valid_at,
               row_number() OVER (ORDER BY x.hop, x.matches DESC, x.distance NULLS LAST,
                                           x.valid_at DESC, x.fact_id DESC) AS rank
        FROM (
            SELECT 1 AS hop, {hit_columns} FROM hop1
            {hop2_union}
        ) AS x
        ORDER BY rank
        LIMIT %(anchor_candidates)s)"""


def anchor_ctes(schema: str, plan: RecallPlan, access: ScopeAccess = SHARED) -> sql.Composed:
    """Anchors (named + near, never hubs), the facts touching them (the `anchor_max_facts` most
    recently written per anchor), then the second hop through the other non-hub entities of the
    named anchors' facts; ordered by relevance, never by physical row order. Anchors and bridges
    are real names only (`entities.real_name`): never a stopword, contraction piece or one-letter
    token; a named anchor is also a word the scope uses as a name (`entities.name_like`).

    Hop-1 facts rank by how many anchors they touch, then by similarity to the query, recency, id.
    Hop-2 facts rank after all hop-1 facts, by the specificity of their bridges (the sum of
    1 / fact_count over the bridges they touch: a bridge shared by few facts says more than one
    shared by many), then the same tie-breaks. So when hop 1 alone fills the list
    (`anchor_candidates` facts), no hop-2 fact could be kept and the second hop is not computed;
    when it runs, every hop-1 fact seeds it, and it skips the hop-1 facts. (An anchor's facts past
    its `anchor_max_facts` could reach hop 2 only when fewer than `anchor_candidates` of its most
    recent links are live: reading every link of every anchor to exclude them cost more.)

    Every link (`fact_entities`) and fact is read by a lookup of one anchor, fact or bridge, never
    by a join the planner may turn into a scan of the scope: each anchor's links, and both hops
    each fact, in a LATERAL subquery behind `OFFSET 0`, which PostgreSQL does not
    flatten. As a plain join, the generic plan of a 100k-fact tenant merged the anchors with all
    172,823 of its links (28-48 ms, a tenth of the recalls; 4-6 ms with the fence), and on a store
    of many small scopes the facts were read by a scan of the scope. A scope searched exactly
    (`RecallPlan.exact`) is scanned once for every signal (`signals.live`): both hops join those
    rows, and its CTEs read once are planned apart (`live.once`).

    With `plan.within` both hops' facts are those of %(within)s only, and so are each anchor's
    `anchor_max_facts` links (else links to facts outside them could fill its share); which
    entities are anchors, bridges or hubs is still judged by the whole scope's counts."""
    distance = sql.SQL("f.embedding <=> %(qvec)s" if plan.embedding else "NULL::float8")
    near_union = sql.SQL("UNION ALL SELECT id, name, false, s FROM near" if plan.embedding else "")
    two_hops = plan.hops >= 2
    columns = sql.SQL(_HIT_COLUMNS)
    live = reads_live(plan)
    hop_facts = (
        sql.SQL("JOIN live f ON f.id = t.fact_id")
        if live
        else fragment(_HOP_FACTS, schema, access=access, known=plan.known, within=plan.within, distance=distance)
    )
    part = partial(fragment, access=access, known=plan.known, hop_facts=hop_facts, once=once(live))
    within_fe = sql.SQL(" AND fe.fact_id = ANY(%(within)b::bigint[])" if plan.within else "")
    hop2 = part(_HOP2, schema, real=sql.SQL(real_name("b.name")))
    return part(
        _ANCHOR,
        schema,
        near_union=near_union,
        hop2=hop2 if two_hops else sql.SQL(""),
        hop2_union=sql.SQL("UNION ALL SELECT 2, {c} FROM hop2").format(c=columns) if two_hops else sql.SQL(""),
        hit_columns=columns,
        real_anchor=sql.SQL(real_name("min(name)")),
        name_like=name_like(schema, access),
        within_fe=within_fe,
    )


def _ctes(schema: str, plan: RecallPlan, access: ScopeAccess) -> Sequence[sql.Composable]:
    anchors = anchor_ctes(schema, plan, access)
    near = near_cte(schema, access, exact=reads_live(plan))
    return (near, anchors) if plan.embedding else (anchors,)


@dataclass(frozen=True, kw_only=True)
class AnchorOptions:
    """The anchor signal's knobs (`RecallOptions.anchor`)."""

    group: ClassVar[str] = "anchor"
    hops: int = 2
    """1: facts touching the anchors; 2: also facts touching the other (non-hub) entities of the
    named anchors' facts (never a near entity's: a hop from a guess adds the guess's neighbours)."""
    vector_top_k: int = 3
    """The most entities the query can come near (the near entities)."""
    vector_min: float | None = None
    """An absolute cosine from which an entity's name embedding is near the query (the `vector_top_k`
    nearest at or above it). None (the default): the scale-free rule of `vector_gap`, since a
    cosine means something else under each embedder (bench/RESULTS.md, "Quality under several
    embedders")."""
    vector_gap: float = 0.5
    """With no `vector_min`, which entities are near the query: among its `vector_pool` nearest (by
    name embedding), those ranked before a drop in similarity wider than this share of the pool's
    spread (nearest minus farthest), within the `vector_top_k` first. At 0.5 the drop is wider than
    all the pool's other steps together: the entities stand apart from the rest as a group, which a
    query naming none of them (a smooth falloff) does not show. Ranks and ratios of differences do
    not move when an embedder's cosines are shifted or scaled."""
    vector_pool: int = 30
    """How many of the query's nearest entities the gap rule compares (at least `vector_top_k` + 1);
    a scope of fewer than `NEAR_MIN_POOL` entities has none near by that rule."""
    candidates: int = 50
    """Length of the anchor signal's list (after ordering by relevance)."""
    max_facts: int = 100
    """Facts read per anchor, most recently written first: an anchor under the hub share can still
    touch thousands of facts (bench/RESULTS.md, "Anchor signal"); the other signals reach its older
    ones."""
    bridge_max_facts: int = 50
    """A second-hop bridge touching more facts than this is skipped: a busy entity under the hub
    share fans the second hop out over much of the scope (bench/RESULTS.md, "Anchor signal")."""
    name_share: float | None = None
    """A one-word named anchor must be linked to at least this share of the facts whose text holds
    its word: a word the extractor once took for a name ("Day", "Step", capitalised inside a
    sentence) is in many more facts' text than are linked to it, a real name ("Kyoto") is linked to
    most of them. Longer names are not tested (`entities.name_like`). 0 turns the test off
    (bench/RESULTS.md, section 6, "Named anchors"). None (the default): the memory chooses, 0.5 or
    0.9 (`recall.adaptive`)."""

    def __post_init__(self) -> None:
        check_types(self, self.group)
        if self.hops not in (1, 2):
            raise LimitError(f"anchor.hops must be 1 or 2, got {self.hops}")
        check_not_negative("anchor.vector_top_k", self.vector_top_k)
        check_cosine("anchor.vector_min", self.vector_min)
        if not 0.0 < self.vector_gap <= 1.0:
            raise LimitError(f"anchor.vector_gap must be in (0, 1], got {self.vector_gap}")
        check_between("anchor.vector_pool", self.vector_pool, 1, 1000)
        check_between("anchor.candidates", self.candidates, 1, 1000)
        check_between("anchor.max_facts", self.max_facts, 1, 1000)
        check_not_negative("anchor.bridge_max_facts", self.bridge_max_facts)
        check_between("anchor.name_share", self.name_share, 0, 1, " (0: off)")


def _params(inputs: RecallRequest) -> Mapping[str, Any]:
    options = inputs.options.anchor
    return {
        "anchor_vector_top_k": options.vector_top_k,
        "anchor_vector_min": options.vector_min,  # NULL: no absolute floor, nothing passes it
        "near_gap": options.vector_gap if options.vector_min is None else None,
        "near_pool": max(options.vector_pool, options.vector_top_k + 1),
        "anchor_candidates": options.candidates,
        "anchor_max_facts": options.max_facts,
        "bridge_max_facts": options.bridge_max_facts,
        "anchor_name_share": options.name_share,
    }


def _explain(hit: HitRow) -> str:
    if hit.hop == 2:
        return f"second hop via {hit.via!r}"
    if hit.via_named:
        return f"touches {hit.via!r}, named in the query"
    return f"touches {hit.via!r}, near the query (similarity {float(hit.via_similarity or 0):.3f})"


SIGNAL = SignalSpec(
    name="anchor",
    statement=1,
    runs=lambda request: request.query is not None or request.embedding is not None,
    ctes=_ctes,
    details=(
        ("hop", "hop"),
        ("via", "via"),
        ("via_named", "via_named"),
        ("via_similarity", "via_similarity"),
        ("similarity", "1-distance"),
    ),
    params=_params,
    explain=_explain,
    requires=(LIVE_FACTS, NAMED_ENTITIES),
)
