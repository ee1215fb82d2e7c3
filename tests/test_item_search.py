"""An item search by query under a filter: the items it selects are ranked by recall's fused score
over their facts alone (`RecallRequest.within`), even when many items it does not select lie nearer
the query; a search without a filter recalls as it did."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memsoda_core import LocalEmbedder, Memory, RecallOptions, RecallResult, ScopeArgs
from memsoda_core.embedders.protocol import Vector
from memsoda_core.items.operations import MAX_WITHIN_FACTS, search_items
from memsoda_core.items.statements import filter_sql, filtered_facts
from memsoda_core.items.values import Condition, parse_filter
from memsoda_core.layouts.access import ScopeAccess
from memsoda_core.recall.signals import RecallRequest, plan_for
from memsoda_core.recall.statements import recall_statements
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope
from tests.conftest import Either
from tests.helpers import generic_plan, plan_nodes
from tests.scripted import Script, drive

INFO = StoreInfo(schema="memsoda", model="scripted", dimensions=4, text_search_config="english")

CROWD = 400
"""Items nearer the query than the filtered ones, outside the filter: more than recall keeps
(`limits.MAX_K`, 200) and than its signals' candidate lists."""


def note(key: str, kind: str, text: str) -> dict[str, Any]:
    return {"namespace": ["notes"], "key": key, "value": {"kind": kind}, "text": text}


async def test_a_filtered_search_ranks_its_items_by_recall_despite_a_nearer_crowd(
    memory: Either, scope: ScopeArgs
) -> None:
    await memory.put_items([note(f"c{n}", "common", f"coffee note {n}: more coffee") for n in range(CROWD)], **scope)
    await memory.put_items([note("beans", "rare", "espresso beans roasted in Ethiopia")], **scope)
    await memory.put_items([note("garden", "rare", "the garden needs watering on Sunday")], **scope)
    found = await memory.search_items(["notes"], query="coffee", filter={"kind": "rare"}, limit=2, **scope)
    assert [i.key for i in found] == ["beans", "garden"]
    assert found[0].score is not None and found[0].score > 0  # a fused score, as without the crowd


async def test_a_filtered_search_finds_by_keyword_an_item_the_vector_ranks_last(
    memory: Either, scope: ScopeArgs
) -> None:
    # Under the filter, "shed" alone holds a word of the query (qx7731) and is the farthest from it by
    # vector; the crowd outside holds both words, newer, so recall over the whole scope kept none of
    # the filtered items. Ranked by recall over the filtered facts, shed's keyword hit puts it first.
    rare = [
        note("shed", "rare", "the garden shed is painted qx7731 green"),
        note("beans", "rare", "espresso beans roasted in Ethiopia"),
        note("cafe", "rare", "a flat white at the corner cafe"),
    ]
    await memory.put_items(rare, **scope)
    crowd = [note(f"c{n}", "common", f"coffee note {n}: more coffee, batch qx7731") for n in range(CROWD)]
    await memory.put_items(crowd, **scope)
    found = await memory.search_items(["notes"], query="coffee qx7731", filter={"kind": "rare"}, limit=3, **scope)
    assert found[0].key == "shed"
    assert all(item.score is not None and item.score > 0 for item in found)
    assert found[0].score > found[1].score


@contextmanager
def own_schema(pg_dsn: str) -> Iterator[str]:
    """A schema of the test's own, dropped with everything in it when the block ends."""
    schema = f"within_{uuid.uuid4().hex[:8]}"
    try:
        yield schema
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.parametrize("layout", ["plain", "partitioned"])
def test_a_filtered_search_of_a_scope_with_its_own_indexes_keeps_to_the_filter(
    pg_dsn: str, embedder: LocalEmbedder, layout: str
) -> None:
    # a scope past the tenant-index threshold runs its own statements (named, generic plans, its own
    # partitions when partitioned); a date in the query adds the date signal's statement
    scope: ScopeArgs = {"dataset": "d", "project": "p"}
    with (
        own_schema(pg_dsn) as schema,
        Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=12, layout=layout) as memory,
    ):
        memory.put_items([note(f"c{n}", "common", f"coffee note {n}: more coffee") for n in range(CROWD)], **scope)
        memory.put_items([note("beans", "rare", "espresso beans roasted in Ethiopia")], **scope)
        memory.put_items([note("garden", "rare", "the garden needs watering on Sunday")], **scope)
        for query in ("coffee", "coffee from last week"):
            found = memory.search_items(["notes"], query=query, filter={"kind": "rare"}, limit=2, **scope)
            assert [i.key for i in found] == ["beans", "garden"], query
            assert all(i.score is not None and i.score > 0 for i in found), query


def test_a_recall_within_given_facts_reads_them_by_key_never_through_an_index_scan_of_the_scope(
    pg_dsn: str, embedder: LocalEmbedder
) -> None:
    """On a scope with its own indexes, the generic plan of every statement of a recall within given
    facts reads the facts by their primary key (`id = ANY(...)`): never through the scope's HNSW
    or text index, whose scan, filtered after it, could end before a list is full."""
    scope = Scope(dataset="d", project="p")
    with (
        own_schema(pg_dsn) as schema,
        Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=12, layout="plain") as memory,
    ):
        memory.put_items(
            [note(f"c{n}", "common", f"coffee note {n}: more coffee") for n in range(CROWD)], **vars(scope)
        )
        with memory._runner.pool.connection() as conn:
            conn.execute(sql.SQL("ANALYZE {}.facts").format(sql.Identifier(schema)))
            for query in ("coffee", "coffee from last week"):
                request = RecallRequest(
                    scope=scope,
                    query=query,
                    embedding=(0.0,),
                    options=RecallOptions(),
                    at=datetime.now(UTC),
                    vectors={"conversation": (0.0,)},
                    within=(1, 2),
                )
                plan = plan_for(request)
                assert {"vector", "keyword", "anchor", "conversation"} <= plan.signals
                for statement in recall_statements(schema, plan, ScopeAccess(named=scope)):
                    reads = [n for n in plan_nodes(generic_plan(conn, statement)) if n.get("Relation Name") == "facts"]
                    assert reads
                    for node in reads:
                        assert _by_given_ids(node), [node.get(k) for k in ("Node Type", "Index Name", "Index Cond")]


def _by_given_ids(node: dict[str, Any]) -> bool:
    """Whether a plan's read of a table looks its rows up by the given ids (`id = ANY(...)`)."""
    if node["Node Type"] == "Bitmap Heap Scan":
        return all(_by_given_ids(child) for child in node.get("Plans", []))
    scan = node["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Index Scan")
    return scan and "id = ANY" in node.get("Index Cond", "")


def _search(conditions: list[Condition], selected: list[tuple[str, int]], asked: list[Sequence[int] | None]) -> Any:
    """`items.operations.search_items` driven with scripted replies: the filter's selection is
    `selected` ((dataset, fact id) rows), and each recall records the facts it was restricted to."""

    def recall_in(where: Scope, keep: int, vector: Vector | None, within: Sequence[int] | None) -> Any:
        asked.append(within)
        return RecallResult(context="", facts=(), entities=())
        yield  # an operation

    filters, _ = filter_sql(conditions)
    script = Script(dimensions=INFO.dimensions).on(filtered_facts(INFO.schema, filters, scoped=True), selected)
    op = search_items(
        INFO,
        "p",
        "d",
        ("notes",),
        query="coffee",
        conditions=conditions,
        limit=2,
        offset=0,
        recall_in=recall_in,
        embed_timeout_s=1.0,
    )
    return drive(op, script)


def test_only_a_filtered_search_restricts_recall_to_the_facts_of_its_items() -> None:
    kind = parse_filter({"kind": "rare"})
    asked: list[Sequence[int] | None] = []
    _search([], [], asked)
    assert asked == [None]  # no filter: recall over the scope, its statements as they were
    asked.clear()
    _search(kind, [("d", 9), ("d", 4), ("d", 9)], asked)
    assert asked == [[4, 9]]
    asked.clear()
    _search(kind, [], asked)
    assert asked == []  # no filtered item has a fact: nothing to recall
    asked.clear()
    _search(kind, [("d", n) for n in range(MAX_WITHIN_FACTS + 1)], asked)
    assert asked == [None]  # more than the bound: recall over the scope, the filter after it
