"""Tenant isolation, property-based: random tenants that share entity names, facts and queries never
see one another's rows, in any signal, the context, raw facts, episodes, stats or exports; `forget`
removes exactly its scope (or exactly one entity's facts) and nothing of anybody else.

Every example writes to fresh (dataset, project) names that differ only in case, spaces, `%`, `_`,
quotes or Unicode normal form, so a filter that matched by prefix, pattern or normalized name, or a
key that concatenated the two names, would leak. Fact ids are global, so "never another tenant's
row" is checked exactly by id; tenant-unique marker words catch leaks into the rendered text.
"""

from __future__ import annotations

import importlib
import io
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from memsoda_core import AsyncMemory, LocalEmbedder, Memory, ScopeArgs
from memsoda_core.limits import MAX_K
from tests.conftest import Either

# --- the shared world tenants draw from -----------------------------------------------------------

FACT_POOL: list[dict[str, Any]] = [
    {"subject": "user", "predicate": "favourite show is", "object": "breaking bad", "object_type": "SHOW"},
    {"subject": "breaking bad", "predicate": "streams on", "object": "netflix", "object_type": "PRODUCT"},
    {"subject": "user", "predicate": "watches", "object": "breaking bad", "mentions": ["netflix"]},
    {"subject": "user", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
    {"subject": "user", "predicate": "writes", "object": "c++", "object_type": "LANGUAGE"},
    {"subject": "user", "predicate": "lives in", "object": "berlin", "object_type": "PLACE", "valid_at": "2024-01-01"},
    {"subject": "user", "predicate": "prefers", "object": "green tea", "object_type": "LITERAL", "confidence": 0.9},
    {"subject": "honda civic", "predicate": "is parked in", "object": "berlin", "anchor": "honda civic"},
    {"subject": "user", "predicate": "dislikes", "object": "cold coffee", "object_type": "LITERAL", "confidence": 0.3},
    {
        "subject": "user",
        "predicate": "lived in",
        "object": "paris",
        "object_type": "PLACE",
        "valid_at": "2020-01-01",
        "invalid_at": "2023-01-01",
    },
]
SHARED_EPISODES = [
    {"thread_id": "t1", "text": "The user planned a road trip to berlin in the honda civic."},
    {"thread_id": "t2", "text": "The user asked what to watch on netflix."},
]
SHARED_QUERIES: list[str | None] = [
    "anything good on Netflix tonight?",
    "what does the user drive",
    "c++",
    None,
]
ENTITY_NAMES = ["user", "breaking bad", "netflix", "honda civic", "c++", "berlin"]
# Tenant names that a sloppy filter would confuse: case, trailing space, LIKE wildcards, quotes,
# a separator, and the same letter in NFC and NFD.
SCOPE_NAMES = ["a", "a ", "A", "ab", "a%", "%", "_", "a_", "a'b", "a|b", "\u00e4", "a\u0308"]


@dataclass
class Tenant:
    dataset: str
    project: str
    marker: str
    facts: list[dict[str, Any]]
    fact_ids: list[int] = field(default_factory=list)
    episode_ids: list[int] = field(default_factory=list)

    @property
    def scope(self) -> ScopeArgs:
        return {"dataset": self.dataset, "project": self.project}

    def all_facts(self) -> list[dict[str, Any]]:
        """What this tenant writes: its share of the pool, then two facts only it has."""
        return [
            *self.facts,
            {"subject": "user", "predicate": "keeps the secret", "object": self.marker, "object_type": "LITERAL"},
            {"subject": f"{self.marker} club", "predicate": "meets on", "object": "netflix", "object_type": "ORG"},
        ]

    def episodes(self) -> list[dict[str, Any]]:
        return [*SHARED_EPISODES, {"thread_id": "t3", "text": f"we talked about {self.marker} and netflix"}]


def entities_of(fact: dict[str, Any]) -> set[str]:
    """The entity names a (pool) fact touches: subject, entity object, mentions, anchor."""
    names = {fact["subject"], *fact.get("mentions", ())}
    if fact.get("object_type") != "LITERAL":
        names.add(fact["object"])
    if fact.get("anchor"):
        names.add(fact["anchor"])
    return names


@st.composite
def worlds(draw: st.DrawFn) -> list[Tenant]:
    """2-3 distinct tenants, each holding a random (overlapping) part of the shared pool."""
    run = uuid.uuid4().hex[:8]
    pairs = draw(
        st.lists(st.tuples(st.sampled_from(SCOPE_NAMES), st.sampled_from(SCOPE_NAMES)), min_size=2, max_size=3)
    )
    tenants: list[Tenant] = []
    seen: set[tuple[str, str]] = set()
    for dataset, project in pairs:
        if (dataset, project) in seen:
            continue
        seen.add((dataset, project))
        facts = draw(st.lists(st.sampled_from(FACT_POOL), min_size=1, max_size=5))
        marker = f"mk{uuid.uuid4().hex[:10]}"
        tenants.append(Tenant(dataset=f"iso-{run}-{dataset}", project=project, marker=marker, facts=facts))
    if len(tenants) < 2:  # the draw repeated one pair: add a neighbour that differs by case only
        base = tenants[0]
        tenants.append(
            Tenant(
                dataset=base.dataset.upper(),
                project=base.project,
                marker=f"mk{uuid.uuid4().hex[:10]}",
                facts=list(FACT_POOL[:3]),
            )
        )
    return tenants


SETTINGS = settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# --- reading a tenant back every way there is ------------------------------------------------------


async def export(memory: Either, tenant: Tenant) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    buffer = io.StringIO()
    await memory.export_jsonl(buffer, **tenant.scope)
    records = [json.loads(line) for line in buffer.getvalue().split("\n") if line]
    return [r for r in records if r["kind"] == "fact"], [r for r in records if r["kind"] == "episode"]


def scope_row_counts(dsn: str, dataset: str, project: str) -> dict[str, int]:
    """Rows of (dataset, project) in every table of the schema that has both columns."""
    with psycopg.connect(dsn) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                """SELECT table_name FROM information_schema.columns
                   WHERE table_schema = 'memsoda' AND column_name IN ('dataset', 'project')
                   GROUP BY table_name HAVING count(*) = 2 ORDER BY table_name"""
            )
        ]
        counts: dict[str, int] = {}
        for table in tables:
            query = sql.SQL("SELECT count(*) FROM memsoda.{} WHERE dataset = %s AND project = %s").format(
                sql.Identifier(table)
            )
            row = conn.execute(query, (dataset, project)).fetchone()
            assert row is not None
            counts[table] = int(row[0])
    assert {"facts", "entities", "fact_entities", "episodes", "scopes"} <= set(counts)
    return counts


async def check_tenant_sees_only_itself(memory: Either, tenant: Tenant, world: list[Tenant]) -> None:
    others = [t for t in world if t is not tenant]
    mine_facts, mine_episodes = set(tenant.fact_ids), set(tenant.episode_ids)
    my_entities = {name for fact in tenant.all_facts() for name in entities_of(fact)}
    queries = [*SHARED_QUERIES, *(t.marker for t in world), *(f"{t.marker} club" for t in others)]
    for query in queries:
        result = await memory.recall(
            query, **tenant.scope, include=["raw", "episodes"], facts_in_context=MAX_K, min_confidence=0.0
        )
        # Every signal's whole list is fused (k = MAX_K is above every list length), so this sees
        # every row any signal ranked.
        for scored in result.facts:
            assert scored.fact.id in mine_facts, (query, scored.ranks, scored.fact)
            assert (scored.fact.dataset, scored.fact.project) == (tenant.dataset, tenant.project)
            assert scored.fact.anchor in my_entities
            assert set(scored.fact.mentions) <= my_entities
        assert {e.name for e in result.entities} <= my_entities
        assert {e.id for e in result.episodes} <= mine_episodes, query
        for other in others:
            assert other.marker not in result.context, (query, other.marker)
            assert all(other.marker not in e.text for e in result.episodes)
            assert all(other.marker not in s.fact.text for s in result.facts)
        if query == tenant.marker:
            assert tenant.marker in result.context  # the tenant does find its own secret
    rows = await memory.stats(**tenant.scope)
    assert len(rows) == 1
    assert rows[0]["dataset"] == tenant.dataset and rows[0]["project"] == tenant.project
    assert rows[0]["facts"] == len(set(tenant.fact_ids))  # equal facts resolve to one (issue 17)
    assert rows[0]["episodes"] == len(tenant.episode_ids)
    assert rows[0]["entities"] == len(my_entities)
    by_dataset = await memory.stats(dataset=tenant.dataset)
    assert {(r["dataset"], r["project"]) for r in by_dataset} == {
        (t.dataset, t.project) for t in world if t.dataset == tenant.dataset
    }
    facts, episodes = await export(memory, tenant)
    assert sorted(r["id"] for r in facts) == sorted(set(tenant.fact_ids))  # equal facts resolve to one (issue 17)
    assert sorted(r["id"] for r in episodes) == sorted(tenant.episode_ids)
    assert sorted((r["subject"], r["predicate"], r["object"]) for r in facts) == sorted(
        {(f["subject"], f["predicate"], f["object"]) for f in tenant.all_facts()}  # equal ones are one
    )
    assert all(other.marker not in json.dumps(facts + episodes) for other in others)


async def write_world(memory: Either, world: list[Tenant]) -> None:
    for tenant in world:
        tenant.fact_ids = await memory.add_facts(tenant.all_facts(), **tenant.scope)
        tenant.episode_ids = await memory.add_episodes(tenant.episodes(), **tenant.scope)


async def forget_world(memory: Either, world: list[Tenant]) -> None:
    for tenant in world:
        await memory.forget(**tenant.scope)


# --- the properties ---------------------------------------------------------------------------------


@SETTINGS
@given(world=worlds())
async def test_no_tenant_ever_sees_another(memory: Either, world: list[Tenant]) -> None:
    await write_world(memory, world)
    try:
        for tenant in world:
            await check_tenant_sees_only_itself(memory, tenant, world)
    finally:
        await forget_world(memory, world)


@settings(SETTINGS, max_examples=4)
@given(world=worlds(), target=st.one_of(st.none(), st.sampled_from([*ENTITY_NAMES, "MARKER CLUB"])))
async def test_forget_removes_exactly_its_scope_or_entity(
    memory: Either, pg_dsn: str, world: list[Tenant], target: str | None
) -> None:
    await write_world(memory, world)
    try:
        victim, bystanders = world[0], world[1:]
        before = {id(t): await export(memory, t) for t in world}
        counts_before = {id(t): scope_row_counts(pg_dsn, t.dataset, t.project) for t in bystanders}
        if target is None:
            assert await memory.forget(**victim.scope) == len(set(victim.fact_ids))
            assert await memory.stats(**victim.scope) == []
            assert await export(memory, victim) == ([], [])
            assert set(scope_row_counts(pg_dsn, victim.dataset, victim.project).values()) == {0}
            for query in SHARED_QUERIES:
                assert (await memory.recall(query, **victim.scope, include=["episodes"])).context == ""
        else:
            name = f"{victim.marker} club" if target == "MARKER CLUB" else target
            facts, episodes = before[id(victim)]
            touching = [r for r in facts if name in {r["subject"], r["object"], r["anchor"], *r["mentions"]}]
            # the export says which facts touch the name; for pool facts that equals entities_of()
            assert {r["id"] for r in touching} <= set(victim.fact_ids)
            # forget takes the name as a user would type it; it is normalized like stored names
            assert await memory.forget(**victim.scope, entity=name.upper()) == len(touching)
            left, left_episodes = await export(memory, victim)
            assert left == [r for r in facts if r not in touching]
            assert left_episodes == episodes
            assert all(name not in {r["subject"], r["object"], r["anchor"], *r["mentions"]} for r in left)
            recalled = await memory.recall(name, **victim.scope, include=["raw"], facts_in_context=MAX_K)
            assert all(s.fact.id not in {r["id"] for r in touching} for s in recalled.facts)
            assert (await memory.stats(**victim.scope))[0]["facts"] == len(left)
        alive = [t for t in world if not (target is None and t is victim)]
        for tenant in bystanders:
            assert await export(memory, tenant) == before[id(tenant)]
            assert scope_row_counts(pg_dsn, tenant.dataset, tenant.project) == counts_before[id(tenant)]
            await check_tenant_sees_only_itself(memory, tenant, alive)
    finally:
        await forget_world(memory, world)


# --- through both adapters ------------------------------------------------------------------------


def adapter(package: str) -> Any:
    """The adapter module, or a skip saying why it could not be imported."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        pytest.skip(f"{package} is not importable yet ({exc}); its isolation test runs once it is")


@pytest.fixture
def twins() -> Iterator[list[Tenant]]:
    """Two tenants with the same facts, one letter of case apart, each with its own secret."""
    run = uuid.uuid4().hex[:8]
    yield [
        Tenant(dataset=f"iso-{run}-a", project="p", marker=f"mk{uuid.uuid4().hex[:10]}", facts=list(FACT_POOL)),
        Tenant(dataset=f"iso-{run}-A", project="p", marker=f"mk{uuid.uuid4().hex[:10]}", facts=list(FACT_POOL)),
    ]


def check_payload(tenant: Tenant, other: Tenant, text: str, metadata: dict[str, Any], mode: str) -> None:
    """One Document / node: its text and metadata hold only the tenant's rows."""
    assert other.marker not in text and other.marker not in json.dumps(metadata)
    facts = [metadata] if mode == "facts" else metadata["facts"]
    for fact in facts:
        assert fact["id"] in tenant.fact_ids
        assert (fact["dataset"], fact["project"]) == (tenant.dataset, tenant.project)
    for episode in metadata.get("episodes", []) if mode == "context" else []:
        assert episode["id"] in tenant.episode_ids


@pytest.mark.parametrize("package", ["memsoda_langchain", "memsoda_llamaindex"])
@pytest.mark.parametrize("mode", ["context", "facts"])
async def test_adapters_never_return_another_tenants_rows(
    package: str, mode: str, pg_dsn: str, embedder: LocalEmbedder, twins: list[Tenant]
) -> None:
    module = adapter(package)
    sync_memory = Memory.open(pg_dsn, embedder)
    async_memory = await AsyncMemory.open(pg_dsn, embedder)
    try:
        await write_world(Either(sync_memory), twins)
        queries = [q for q in SHARED_QUERIES if q] + [t.marker for t in twins] + [f"{t.marker} club" for t in twins]
        for me, other in (twins, twins[::-1]):
            for raw in (sync_memory, async_memory):
                retriever = module.MemsodaRetriever(memory=raw, **me.scope, mode=mode, k=MAX_K, include=["episodes"])
                for query in queries:
                    if package == "memsoda_langchain":
                        docs = await retriever.ainvoke(query)
                        if raw is sync_memory:
                            assert retriever.invoke(query) == docs
                        payloads = [(d.page_content, d.metadata) for d in docs]
                    else:
                        nodes = await retriever.aretrieve(query)
                        if raw is sync_memory:
                            assert retriever.retrieve(query) == nodes
                        payloads = [(n.node.get_content(), n.node.metadata) for n in nodes]
                    for text, metadata in payloads:
                        check_payload(me, other, text, metadata, mode)
                    if query == me.marker:
                        assert any(me.marker in text for text, _ in payloads)
    finally:
        await forget_world(Either(sync_memory), twins)
        sync_memory.close()
        await async_memory.close()
