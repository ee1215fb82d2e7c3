"""Tenant-local indexes: built when a scope grows past the threshold, used by recall, rebuilt
when left invalid, dropped with the scope."""

from __future__ import annotations

import asyncio
import io
import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from memsoda_core import (
    ConfigurationError,
    EmbeddingError,
    LocalEmbedder,
    Memory,
    MemsodaError,
    RecallOptions,
    ScopeArgs,
    ValidationError,
)
from memsoda_core.cli import app
from memsoda_core.layouts.access import SHARED, ScopeAccess, ScopeSize
from memsoda_core.options import VectorOptions
from memsoda_core.recall.plans import FULL_PLAN
from memsoda_core.recall.result import plan_for, statement_params
from memsoda_core.recall.signals import RecallRequest
from memsoda_core.recall.statements import recall_statements
from memsoda_core.runner.policy import PREPARED_MAX
from memsoda_core.store.tenant_index import tenant_indexes
from memsoda_core.validation import Scope
from tests.conftest import open_memory
from tests.helpers import CountingEmbedder, generic_plan, plan_nodes, run_compiled

THRESHOLD = 12


def _facts(n: int, offset: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "subject": f"Person{(i + offset) % 5}",
            "predicate": "visited",
            "object": f"Town{i + offset}",
            "object_type": "LOCATION",
            "valid_at": "2024-01-01T00:00:00Z",
        }
        for i in range(n)
    ]


def _valid_indexes(conn: psycopg.Connection[Any], schema: str) -> dict[str, bool]:
    rows = conn.execute(
        """SELECT c.relname, i.indisvalid FROM pg_index i
           JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s""",
        (schema,),
    ).fetchall()
    return {str(name): bool(valid) for name, valid in rows}


@contextmanager
def dropped_after(pg_dsn: str, schema: str) -> Iterator[str]:
    """`schema`, dropped with everything in it when the block ends."""
    try:
        yield schema
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def small_threshold(pg_dsn: str, embedder: LocalEmbedder) -> Iterator[Memory]:
    with (
        dropped_after(pg_dsn, "tenant_index_test") as schema,
        Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, layout="plain") as memory,
    ):
        yield memory


def test_indexes_appear_when_the_scope_crosses_the_threshold(small_threshold: Memory, pg_dsn: str) -> None:
    memory = small_threshold
    names = {index.name for index in tenant_indexes(Scope(dataset="d", project="big"))}
    memory.add_facts(_facts(THRESHOLD - 1), dataset="d", project="big")
    memory.add_facts(_facts(THRESHOLD), dataset="d", project="small")  # another scope crossing alone
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert not names & set(_valid_indexes(conn, memory.info.schema))
        memory.add_facts(_facts(1, offset=100), dataset="d", project="big")
        present = _valid_indexes(conn, memory.info.schema)
    assert {name: present.get(name) for name in names} == dict.fromkeys(names, True)
    # no index shared by every tenant is left
    assert not {"facts_embedding_hnsw", "facts_tsv", "entities_embedding_hnsw"} & set(present)


def test_recall_uses_the_tenant_index_and_finds_the_same_facts(small_threshold: Memory, pg_dsn: str) -> None:
    memory = small_threshold
    memory.add_facts(_facts(10), dataset="d", project="exact")
    memory.add_facts(_facts(10), dataset="d", project="indexed")
    memory.add_facts(_facts(10, offset=10), dataset="d", project="indexed")
    exact = memory.recall("Who visited Town3?", dataset="d", project="exact")
    indexed = memory.recall("Who visited Town3?", dataset="d", project="indexed")
    assert exact.facts[0].fact.object == "town3"
    assert indexed.facts[0].fact.object == "town3"
    vector_index = tenant_indexes(Scope(dataset="d", project="indexed"))[0].name
    with memory._runner.pool.connection() as conn:  # a pooled connection: memsoda's session settings
        conn.execute("SET enable_seqscan = off")  # 20 rows: make the choice the one at scale
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                sql.SQL(
                    """EXPLAIN SELECT id FROM {}.facts WHERE dataset = 'd' AND project = 'indexed'
                       ORDER BY embedding <=> %s::vector LIMIT 8"""
                ).format(sql.Identifier(memory.info.schema)),
                (str(memory.embedder.embed_query("Town3")),),
            ).fetchall()
        )
    assert vector_index in plan


def test_an_invalid_index_left_by_a_crash_is_rebuilt_at_open(pg_dsn: str, embedder: LocalEmbedder) -> None:
    index = tenant_indexes(Scope(dataset="d", project="p"))[0].name
    with dropped_after(pg_dsn, "tenant_index_crash") as schema:
        with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, layout="plain") as memory:
            memory.add_facts(_facts(THRESHOLD), dataset="d", project="p")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (f"{schema}.{index}",)
            )
            assert _valid_indexes(conn, schema)[index] is False
        with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, layout="plain") as memory:
            assert memory.recall("Town1", dataset="d", project="p").facts
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert _valid_indexes(conn, schema)[index] is True


def test_forgetting_a_scope_drops_its_indexes(small_threshold: Memory, pg_dsn: str) -> None:
    memory = small_threshold
    memory.add_facts(_facts(THRESHOLD), dataset="d", project="gone")
    names = {index.name for index in tenant_indexes(Scope(dataset="d", project="gone"))}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert names <= set(_valid_indexes(conn, memory.info.schema))
    assert memory.forget(dataset="d", project="gone") == THRESHOLD
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert not names & set(_valid_indexes(conn, memory.info.schema))


def test_maintain_builds_indexes_for_rows_loaded_around_memsoda(small_threshold: Memory, pg_dsn: str) -> None:
    memory = small_threshold
    memory.add_facts(_facts(THRESHOLD), dataset="d", project="copied")
    names = [index.name for index in tenant_indexes(Scope(dataset="d", project="copied"))]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(memory.info.schema), sql.Identifier(name)))
    assert sorted(memory.maintain().indexes) == sorted(names)
    assert memory.maintain().indexes == ()


def _index_oids(pg_dsn: str, schema: str) -> dict[str, int]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            """SELECT c.relname, c.oid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND i.indisvalid""",
            (schema,),
        ).fetchall()
    return {str(name): int(oid) for name, oid in rows}


def test_a_large_import_rebuilds_the_fact_index_after_the_rows_and_a_small_one_keeps_it(
    small_threshold: Memory, pg_dsn: str
) -> None:
    memory = small_threshold
    scope: ScopeArgs = {"dataset": "d", "project": "imported"}
    memory.add_facts(_facts(4 * THRESHOLD), **scope)
    facts_index, entities_index, _ = (index.name for index in tenant_indexes(Scope(**scope)))
    before = _index_oids(pg_dsn, memory.info.schema)
    small = "\n".join(json.dumps(fact) for fact in _facts(THRESHOLD - 1, offset=500))  # under 1/4 of 48
    memory.import_jsonl(io.StringIO(small), **scope)
    assert _index_oids(pg_dsn, memory.info.schema)[facts_index] == before[facts_index]
    large = "\n".join(json.dumps(fact) for fact in _facts(THRESHOLD + 3, offset=1000))  # over 1/4 of 59
    memory.import_jsonl(io.StringIO(large), **scope)
    after = _index_oids(pg_dsn, memory.info.schema)
    assert after[facts_index] != before[facts_index]  # dropped, then built again, valid
    assert after[entities_index] == before[entities_index]  # only the fact HNSW is set aside
    result = memory.recall("who visited Town1005?", **scope)
    assert result.facts[0].fact.object == "town1005"
    # the caller decides either way
    memory.import_jsonl(io.StringIO(large.replace("Town1", "Town2")), **scope, rebuild_index=False)
    assert _index_oids(pg_dsn, memory.info.schema)[facts_index] == after[facts_index]
    memory.import_jsonl(io.StringIO(small.replace("Town", "Village")), **scope, rebuild_index=True)
    assert _index_oids(pg_dsn, memory.info.schema)[facts_index] != after[facts_index]
    with pytest.raises(ValidationError, match="rebuild_index"):
        memory.import_jsonl(io.StringIO(small), **scope, rebuild_index="yes")  # type: ignore[arg-type]


class FailsOnCall(CountingEmbedder):
    """The real model, raising on its `n`-th embed_documents call (counted from 1)."""

    def __init__(self, inner: Any, n: int) -> None:
        super().__init__(inner)
        self.n = n

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.document_calls + 1 == self.n:
            self.document_calls += 1
            raise RuntimeError("the embedding service went away")
        return super().embed_documents(texts)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_failed_import_gives_back_the_index_it_set_aside(
    pg_dsn: str, embedder: LocalEmbedder, flavour: str
) -> None:
    scope: ScopeArgs = {"dataset": "d", "project": "failed"}
    with dropped_after(pg_dsn, f"tenant_index_failed_import_{flavour}") as schema:
        with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, layout="plain") as memory:
            memory.add_facts(_facts(THRESHOLD), **scope)
        facts_index = tenant_indexes(Scope(**scope))[0].name
        before = _index_oids(pg_dsn, schema)[facts_index]
        failing = FailsOnCall(embedder, n=2)  # the second batch of the import
        lines = "\n".join(json.dumps(fact) for fact in _facts(THRESHOLD, offset=300))
        memory_either = await open_memory(flavour, pg_dsn, failing, schema=schema)
        try:
            with pytest.raises(EmbeddingError):
                await memory_either.import_jsonl(io.StringIO(lines), **scope, batch_size=THRESHOLD // 2)
            assert (await memory_either.stats(**scope))[0]["facts"] == THRESHOLD  # nothing of the import
        finally:
            await memory_either.close()
        after = _index_oids(pg_dsn, schema)
        assert after[facts_index] != before  # it was set aside, and is back (valid) after the failure


def test_threshold_must_be_a_positive_int(pg_dsn: str, embedder: LocalEmbedder) -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigurationError, match="tenant_index_min_facts"):
            Memory.open(pg_dsn, embedder, schema="never_made", tenant_index_min_facts=bad)  # type: ignore[arg-type]


def test_a_session_idle_in_transaction_delays_the_build_but_never_hangs_the_write(
    small_threshold: Memory, pg_dsn: str
) -> None:
    memory = small_threshold
    names = {index.name for index in tenant_indexes(Scope(dataset="d", project="blocked"))}
    with psycopg.connect(pg_dsn) as idle:
        idle.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        idle.execute("SELECT 1")  # idle in a transaction that holds a snapshot
        ids = memory.add_facts(_facts(THRESHOLD), dataset="d", project="blocked")  # returns: lock_timeout
        assert len(ids) == THRESHOLD
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert not {n for n, valid in _valid_indexes(conn, memory.info.schema).items() if valid} & names
    memory.add_facts(_facts(1, offset=50), dataset="d", project="blocked")  # the next write builds them
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        present = _valid_indexes(conn, memory.info.schema)
    assert {name: present.get(name) for name in names} == dict.fromkeys(names, True)
    assert memory.stats(dataset="d", project="blocked")[0]["facts"] == THRESHOLD + 1


def test_the_vector_list_is_full_through_a_tenant_index_despite_filtered_rows(small_threshold: Memory) -> None:
    """pgvector's HNSW scan filters after the fact; memsoda's iterative scans keep going until the
    list is full, so invalidated and low-confidence rows never shorten it."""
    memory = small_threshold
    facts = _facts(60)
    for i, fact in enumerate(facts):
        if i % 3 == 0:
            fact["invalid_at"] = "2024-06-01T00:00:00Z"
        elif i % 3 == 1:
            fact["confidence"] = 0.2
    memory.add_facts(facts, dataset="d", project="filtered")
    options = RecallOptions(vector=VectorOptions(candidates=15))
    scope = Scope(dataset="d", project="filtered")
    query = "who visited a town"
    params = statement_params(
        RecallRequest(
            scope=scope,
            query=query,
            embedding=memory.embedder.embed_query(query),
            at=datetime.now(UTC),
            options=options,
            text_search_config=memory.info.text_search_config,
        )
    )
    vector_statement = recall_statements(
        memory.info.schema,
        plan_for(RecallRequest(scope=scope, query=query, embedding=(0.0,), options=options, at=datetime.now(UTC))),
    )[0]
    with memory._runner.pool.connection() as conn:  # memsoda's session settings (iterative scans)
        conn.execute("SET enable_seqscan = off")  # 60 rows: make the choice the one at scale
        conn.execute("SET hnsw.ef_search = 10")  # one plain HNSW pass would yield 10 rows, ~3 of them live
        plan = "\n".join(r[0] for r in run_compiled(conn, vector_statement, params, before=b"EXPLAIN "))
        rows = run_compiled(conn, vector_statement, params)
    assert tenant_indexes(scope)[0].name in plan
    vector_ids = [row[1] for row in rows if row[0] == "vector"]
    assert len(vector_ids) == 15  # 20 of the 60 facts are live and above the floor; the list asked for 15


def test_the_threshold_is_recorded_in_the_store_and_used_by_the_cli_maintain(
    pg_dsn: str, embedder: LocalEmbedder
) -> None:
    index = tenant_indexes(Scope(dataset="d", project="p"))[0].name
    with dropped_after(pg_dsn, "tenant_index_recorded") as schema:
        with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, layout="plain") as memory:
            memory.add_facts(_facts(THRESHOLD), dataset="d", project="p")
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:  # no threshold given: the recorded one
            assert memory.info.tenant_index_min_facts == THRESHOLD
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(index)))
        env = {"COLUMNS": "200", "NO_COLOR": "1"}
        doctor = CliRunner().invoke(app, ["--dsn", pg_dsn, "--schema", schema, "doctor", "--json"], env=env)
        (check,) = [c for c in json.loads(doctor.output) if c["name"] == "tenant indexes"]
        assert check["status"] == "warn" and f"d/p ({index})" in check["detail"]
        assert "memsoda maintain" in check["fix"]
        result = CliRunner().invoke(app, ["--dsn", pg_dsn, "--schema", schema, "maintain", "--json"], env=env)
        assert result.exit_code == 0, result.output
        # opening the store already rebuilt it (with the recorded threshold), so maintain finds nothing left
        purged = {"facts": 0, "items": 0}  # maintain applies retention first; this store has no rules
        expected = {
            "built": [],
            "tenant_index_min_facts": THRESHOLD,
            "purged": purged,
            "overlaps_repaired": 0,
            "overlaps_left": 0,
        }
        assert json.loads(result.output) == expected
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert _valid_indexes(conn, schema)[index] is True
        doctor = CliRunner().invoke(app, ["--dsn", pg_dsn, "--schema", schema, "doctor", "--json"], env=env)
        (check,) = [c for c in json.loads(doctor.output) if c["name"] == "tenant indexes"]
        assert check["status"] == "ok" and check["detail"].startswith("1 scope of 12+ facts")


@pytest.mark.parametrize("project", ["indexed", "unindexed"])
def test_the_half_rule_tsquery_is_built_once_per_recall(small_threshold: Memory, project: str) -> None:
    """The half rule's tsquery (an OR of conjunctions built from the query's lexemes) is computed
    once per statement. Without a tenant GIN index the planner once folded it into the per-row
    filter and rebuilt it for every candidate fact (5-6 ms for a 1,000-fact tenant)."""
    memory = small_threshold
    memory.add_facts(_facts(THRESHOLD + 4 if project == "indexed" else THRESHOLD // 2), dataset="d", project=project)
    assert bool(tenant_indexes(Scope(dataset="d", project=project))[0].name in _index_names(memory)) == (
        project == "indexed"
    )
    query = "person0 visited town3"
    options = RecallOptions()
    params = statement_params(
        RecallRequest(
            scope=Scope(dataset="d", project=project),
            query=query,
            embedding=memory.embedder.embed_query(query),
            at=datetime.now(UTC),
            options=options,
            text_search_config=memory.info.text_search_config,
        )
    )
    # as recall runs them: an indexed scope's own statements on a generic plan, else the shared ones
    indexed = Scope(dataset="d", project=project) if project == "indexed" else None
    access = SHARED if indexed is None else ScopeAccess(named=indexed)
    vector_and_keyword = recall_statements(memory.info.schema, FULL_PLAN, access)[0]
    with memory._runner.pool.connection() as conn:
        if indexed:
            conn.execute("SET plan_cache_mode = force_generic_plan")
        ((explained,),) = run_compiled(conn, vector_and_keyword, params, before=b"EXPLAIN (ANALYZE, FORMAT JSON) ")
        rows = run_compiled(conn, vector_and_keyword, params)
        conn.execute("RESET plan_cache_mode")
    # the keyword rule's tsquery is built by the keyword_any CTE (issue 20; before, generate_series)
    builders = [node for node in plan_nodes(explained[0]["Plan"]) if node.get("Subplan Name") == "CTE keyword_any"]
    assert builders and all(node["Actual Loops"] == 1 for node in builders)
    assert [row for row in rows if row[0] == "keyword"]  # the rule let matching facts through


def _reads_by_key_or_own_index(node: dict[str, Any], own: set[str]) -> bool:
    """Whether a scan of one of memsoda's tables reads by a key beyond the scope (a lookup),
    through one of the scope's own indexes, or by the scope named as literals (planned from that
    scope's own statistics, not the table's average), rather than a bound scope read whole."""
    if node["Node Type"] == "Bitmap Heap Scan":
        return all(child.get("Index Name") in own for child in plan_nodes(node) if child is not node)
    if node["Node Type"] not in ("Index Scan", "Index Only Scan"):
        return False
    condition = node.get("Index Cond", "")
    key = re.search(r"\b(name|id|entity_id|fact_id|lexeme) = ", condition)
    return node.get("Index Name") in own or key is not None or "dataset = '" in condition


def test_generic_plans_read_links_by_lookup_and_an_indexed_scope_never_whole(small_threshold: Memory) -> None:
    """Generic plans are chosen from average estimates (one scope's rows = the table's average),
    so a statement must leave them no bad choice.

    - Every read of `fact_entities` in the anchor statement, shared or an indexed scope's own,
      looks up an entity or a fact of this recall. The planner once joined the anchors to every
      link of the scope (a merge join over 172,823 rows of a 100k-fact tenant: 28-48 ms for a
      tenth of the recalls).
    - In an indexed scope's own statements, every read of a table is a lookup, goes through one
      of the scope's own indexes, or is planned for the scope by name (the shared statements scan
      a small scope whole, by design). The keyword statement's named-entity and lexeme reads were
      scans of the scope on this store before they were fenced."""
    memory = small_threshold
    facts = _facts(THRESHOLD - 2)
    vectors = memory.embedder.embed_documents([f"{f['subject']} {f['predicate']} {f['object']}" for f in facts])
    for i in range(40):  # many scopes of one size: what the generic plan estimates for a scope
        memory.add_facts(facts, dataset="d", project=f"small-{i}", vectors=vectors)
    memory.add_facts(_facts(THRESHOLD + 4), dataset="d", project="indexed")
    scope = Scope(dataset="d", project="indexed")
    own = {index.name for index in tenant_indexes(scope)}
    tables = {"facts", "entities", "fact_entities", "lexemes"}
    plan = FULL_PLAN
    with memory._runner.pool.connection() as conn:
        for table in ("facts", "entities", "fact_entities", "lexemes", "scopes"):  # not left to autovacuum's timing
            conn.execute(sql.SQL("ANALYZE {}.{}").format(sql.Identifier(memory.info.schema), sql.Identifier(table)))
        for indexed in (None, scope):
            statements = recall_statements(memory.info.schema, plan, ScopeAccess(named=indexed))
            links = [
                n for n in plan_nodes(generic_plan(conn, statements[1])) if n.get("Relation Name") == "fact_entities"
            ]
            assert len(links) >= 3  # hop 1 (the most recent links per anchor), bridges, hop 2
            for node in links:
                assert re.search(r"\((entity_id|fact_id) = \w+\.\w+\)", node.get("Index Cond", "")), (indexed, node)
        for statement in recall_statements(memory.info.schema, plan, ScopeAccess(named=scope)):
            reads = [n for n in plan_nodes(generic_plan(conn, statement)) if n.get("Relation Name") in tables]
            assert reads
            for node in reads:
                assert _reads_by_key_or_own_index(node, own), [
                    node.get(k) for k in ("Relation Name", "Index Name", "Index Cond")
                ]


def _index_names(memory: Memory) -> set[str]:
    with memory._runner.pool.connection() as conn:
        return set(_valid_indexes(conn, memory.info.schema))


# --- plans: kept per connection, never shared between an indexed scope and any other ------------


def _prepared(memory: Memory) -> dict[str, tuple[int, int]]:
    """Prepared statements of the store's only pooled connection: text -> (generic, custom) plans."""
    with memory._runner.pool.connection() as conn:
        rows = conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements").fetchall()
    return {str(text): (int(generic), int(custom)) for text, generic, custom in rows}


def _signal_statements(memory: Memory) -> dict[str, tuple[int, int]]:
    return {text: plans for text, plans in _prepared(memory).items() if text.startswith("WITH")}


@pytest.fixture
def one_connection(pg_dsn: str, embedder: LocalEmbedder) -> Iterator[Memory]:
    """A store with one pooled connection (so its prepared statements can be read) and a small
    tenant-index threshold."""
    with (
        dropped_after(pg_dsn, "prepared_test") as schema,
        Memory.open(
            pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, pool_size=1, layout="plain"
        ) as memory,
    ):
        yield memory


def _index_scans(memory: Memory, index: str) -> int:
    with memory._runner.pool.connection() as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, flushed at commit
        conn.commit()
        conn.execute("SELECT pg_stat_clear_snapshot()")
        ((scans,),) = conn.execute(
            "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = %s", (index,)
        ).fetchall()
    return int(scans)


def test_small_scopes_share_kept_plans_and_an_indexed_scope_gets_generic_plans_that_use_its_indexes(
    one_connection: Memory,
) -> None:
    memory = one_connection
    memory.add_facts(_facts(THRESHOLD // 2), dataset="d", project="small")
    memory.add_facts(_facts(THRESHOLD + 2), dataset="d", project="indexed")
    for _ in range(7):  # past PostgreSQL's five custom plans, when it may keep a generic one
        memory.recall("Person1 visited a town", dataset="d", project="small")
    shared = _signal_statements(memory)
    assert len(shared) == 1 and all(generic > 0 for generic, _ in shared.values())  # one: every signal
    assert not any("'small'" in text for text in shared)  # one text for every small scope: values bound

    with memory._runner.pool.connection() as conn:
        assert conn.prepared_max == PREPARED_MAX  # bounds the server memory the kept plans hold
        conn.execute("SET enable_seqscan = off")  # 14 rows: make the choice the one at scale
    vector_index = tenant_indexes(Scope(dataset="d", project="indexed"))[0].name
    scans = _index_scans(memory, vector_index)
    for _ in range(3):
        memory.recall("Person1 visited a town", dataset="d", project="indexed")
    own = {text: plans for text, plans in _signal_statements(memory).items() if text not in shared}
    assert len(own) == 2 and all("'indexed'" in text for text in own)  # its own texts name it
    assert all(custom == 0 and generic == 3 for generic, custom in own.values())  # generic from the first run
    assert _index_scans(memory, vector_index) > scans  # and that generic plan used the scope's HNSW
    with memory._runner.pool.connection() as conn:
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)  # forced for those statements only


def test_a_write_that_grows_a_scope_past_the_threshold_moves_it_to_its_own_statements(one_connection: Memory) -> None:
    memory = one_connection
    memory.add_facts(_facts(THRESHOLD // 2), dataset="d", project="growing")
    memory.recall("Person1 visited a town", dataset="d", project="growing")  # remembers: small
    assert not any("'growing'" in text for text in _signal_statements(memory))
    memory.add_facts(_facts(THRESHOLD, offset=100), dataset="d", project="growing")  # now indexed
    memory.recall("Person1 visited a town", dataset="d", project="growing")
    assert sum("'growing'" in text for text in _signal_statements(memory)) == 2


def test_a_failed_generic_statement_leaves_the_session_setting_alone(pg_dsn: str) -> None:
    from memsoda_core.runner.steps import Execute, Planning
    from memsoda_core.runner.sync_runner import _fetch

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):  # fails on the server: rolled back with it
            _fetch(conn, Execute(sql.SQL("SELECT 1 / %(zero)s"), {"zero": 0}, Planning.GENERIC))
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        assert _fetch(conn, Execute(sql.SQL("SELECT 6 * %(n)s"), {"n": 7}, Planning.GENERIC)) == [(42,)]
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        conn.autocommit = False  # inside an operation's transaction, the statement resets it itself
        assert _fetch(conn, Execute(sql.SQL("SELECT 6 * %(n)s"), {"n": 7}, Planning.GENERIC)) == [(42,)]
        assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        conn.rollback()


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_generic_statement_the_client_abandons_is_reset_before_the_connection_is_reused(
    pg_dsn: str, embedder: LocalEmbedder, flavour: str
) -> None:
    """An error raised in the client between the SET and the RESET (here: a missing parameter)
    leaves the SET committed on a recall's autocommit connection; the runner restores it before
    the connection goes back to the pool."""
    from memsoda_core.runner.steps import Execute, Operation, Planning

    def abandoned() -> Operation[None]:
        yield Execute(sql.SQL("SELECT %(missing)s::int"), {}, Planning.GENERIC)

    with dropped_after(pg_dsn, "generic_reset_test") as schema:
        either = await open_memory(flavour, pg_dsn, embedder, schema=schema, pool_size=1)
        store = either.raw
        try:
            with pytest.raises(MemsodaError):
                await either._run(abandoned(), read_only=True)  # recall's kind of run
            if isinstance(store, Memory):  # the "sync" flavour
                with store._runner.pool.connection() as conn:  # the same, only connection
                    assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
            else:
                async with store._runner.pool.connection() as aconn:
                    assert await (await aconn.execute("SHOW plan_cache_mode")).fetchone() == ("auto",)
        finally:
            await either.close()


HOSTILE_SCOPE_NAMES = ["50% off", "a%(dataset)sb", "O'Brien \\ co", "team  \n  A", "ünï ✓"]


@pytest.mark.parametrize("project", HOSTILE_SCOPE_NAMES)
def test_an_indexed_scope_with_any_name_recalls_through_its_own_statements(
    small_threshold: Memory, project: str
) -> None:
    """Its own statements carry its names as literals: quotes, backslashes, `%` (which psycopg
    reads as a placeholder) and newlines between spaces (which rendering trims elsewhere) must all
    reach PostgreSQL unchanged, or the search would silently filter on another name."""
    memory = small_threshold
    memory.add_facts(_facts(THRESHOLD + 2), dataset="d", project=project)
    scope = Scope(dataset="d", project=project)
    assert tenant_indexes(scope)[0].name in _index_names(memory)
    own = memory.recall("Person1 visited Town3", dataset="d", project=project)
    memory._context.scope_sizes.put(scope, ScopeSize(0))  # as if small: the shared statements, with the names bound
    shared = memory.recall("Person1 visited Town3", dataset="d", project=project)
    assert own.facts and "vector" in own.facts[0].ranks and "keyword" in own.facts[0].ranks
    assert [s.fact.text for s in own.facts] == [s.fact.text for s in shared.facts]


def test_the_longest_names_recall_through_own_and_shared_statements(pg_dsn: str, embedder: LocalEmbedder) -> None:
    """No statement has a length budget: a 63-character schema and an indexed scope with
    200-character names (the limits), which its own statements carry as literals, recall the same
    facts through its own statements and through the shared ones."""
    schema = "s" * 63  # (`%` is refused in a schema name: the write statements are read by psycopg)
    scope = Scope(dataset="d%(project)s" * 16 + "d" * 8, project="p'" * 100)
    assert (len(schema), len(scope.dataset), len(scope.project)) == (63, 200, 200)
    names: ScopeArgs = {"dataset": scope.dataset, "project": scope.project}
    with (
        dropped_after(pg_dsn, schema),
        Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, layout="plain") as memory,
    ):
        memory.add_facts(_facts(THRESHOLD + 2), **names)
        assert tenant_indexes(scope)[0].name in _index_names(memory)
        own = memory.recall("Person1 visited Town3", **names)
        memory._context.scope_sizes.put(scope, ScopeSize(0))  # as if small: the shared statements, with the names bound
        shared = memory.recall("Person1 visited Town3", **names)
        with memory._runner.pool.connection() as conn:
            kept = [str(text) for (text,) in conn.execute("SELECT statement FROM pg_prepared_statements")]
    assert own.facts and "vector" in own.facts[0].ranks and "keyword" in own.facts[0].ranks
    assert [s.fact.text for s in own.facts] == [s.fact.text for s in shared.facts]
    assert any("'" + scope.project.replace("'", "''") + "'" in text for text in kept)  # its own statements ran


def test_shared_and_own_statements_return_the_same_recall(small_threshold: Memory) -> None:
    memory = small_threshold
    facts = _facts(THRESHOLD // 2 + 1)
    facts[0]["invalid_at"] = "2024-06-01T00:00:00Z"
    memory.add_facts(facts, dataset="d", project="same")
    queries = ["Person1 visited a town", "Town3", "who went where", None]
    shared = [memory.recall(q, dataset="d", project="same") for q in queries * 3]
    # as if indexed: its own statements
    memory._context.scope_sizes.put(
        Scope(dataset="d", project="same"), ScopeSize(10**9)
    )  # as if indexed: its own statements
    own = [memory.recall(q, dataset="d", project="same") for q in queries * 3]
    assert [r.context for r in shared] == [r.context for r in own]
    assert [[(s.fact.id, s.ranks) for s in r.facts] for r in shared] == [
        [(s.fact.id, s.ranks) for s in r.facts] for r in own
    ]


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_without_pipelines_recall_runs_its_statements_one_after_the_other_with_the_same_result(
    pg_dsn: str, embedder: LocalEmbedder, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq < 14 has no pipelines: no statements at once, no forced generic plans, same facts."""
    import memsoda_core.runner.async_runner
    import memsoda_core.runner.sync_runner

    with dropped_after(pg_dsn, "no_pipeline_test") as schema:
        memory = await open_memory(
            flavour, pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, layout="plain"
        )
        try:
            await memory.add_facts(_facts(THRESHOLD // 2), dataset="d", project="small")
            await memory.add_facts(_facts(THRESHOLD + 2), dataset="d", project="indexed")
            scopes: list[ScopeArgs] = [{"dataset": "d", "project": project} for project in ("small", "indexed")]
            piped = [await memory.recall("Who visited Town3?", **scope) for scope in scopes]
            runner = memsoda_core.runner.async_runner if memory.is_async else memsoda_core.runner.sync_runner
            monkeypatch.setattr(runner, "PIPELINE_SUPPORTED", False)

            def no_pipeline(*args: Any) -> Any:
                raise psycopg.NotSupportedError("libpq too old for pipelines")

            for connection_class in (psycopg.Connection, psycopg.AsyncConnection):
                monkeypatch.setattr(connection_class, "pipeline", no_pipeline)
            lent: list[int] = []
            getconn = memory.raw._runner.pool.getconn

            def counted_getconn(*args: Any, **kwargs: Any) -> Any:
                lent.append(1)
                return getconn(*args, **kwargs)

            monkeypatch.setattr(memory.raw._runner.pool, "getconn", counted_getconn)
            alone = [await memory.recall("Who visited Town3?", **scope) for scope in scopes]
        finally:
            await memory.close()
    assert len(lent) == len(scopes)  # one connection per recall: no spare was asked for
    for before, after in zip(piped, alone, strict=True):
        assert [s.fact.id for s in after.facts] == [s.fact.id for s in before.facts]
        assert after.facts and after.context == before.context


def test_array_parameters_keep_one_type_so_a_kept_statement_is_prepared_once(pg_dsn: str) -> None:
    """psycopg types a plain list by its contents (empty: untyped; ints: int2/int4/int8 by size) and
    prepares a statement once per set of parameter types."""
    from memsoda_core.store.params import BigintArray, TextArray

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for texts in ([], ["a b", 'quote " and \\\\ backslash', "ünï"]):
            row = conn.execute("SELECT %(a)b::text[]", {"a": TextArray(texts)}, prepare=True).fetchone()
            assert row == (texts,)
        for ids in ([], [1], [2**40, -3]):
            row = conn.execute("SELECT %(a)b::bigint[]", {"a": BigintArray(ids)}, prepare=True).fetchone()
            assert row == (ids,)
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (2,)


def _sleep(seconds: float) -> Any:
    from memsoda_core.runner.steps import Execute

    return Execute(sql.SQL("SELECT pg_sleep(%(s)s)"), {"s": seconds})


def test_a_statement_failing_beside_another_stops_that_one_too(pg_dsn: str) -> None:
    from memsoda_core.runner.steps import Execute
    from memsoda_core.runner.sync_runner import _fetch_at_once

    failing = Execute(sql.SQL("SELECT 1 / %(zero)s"), {"zero": 0})
    with psycopg.connect(pg_dsn, autocommit=True) as slow, psycopg.connect(pg_dsn, autocommit=True) as fails:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.DivisionByZero):
            _fetch_at_once([slow, fails], [_sleep(20), failing])
        assert time.monotonic() - started < 10  # not the 20 s of the statement beside it
        assert slow.execute("SELECT 42").fetchone() == (42,)  # and the connection is usable


def test_an_interrupted_sync_recall_step_stops_every_statement_it_sent(pg_dsn: str) -> None:
    """Ctrl-C (a real SIGINT) while the runner waits for its statements: both are cancelled on the
    server, not left running for their 20 and 10 s, and both connections stay usable."""
    from memsoda_core.runner.sync_runner import _fetch_at_once

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    with psycopg.connect(pg_dsn, autocommit=True) as slow, psycopg.connect(pg_dsn, autocommit=True) as slower:
        pids = [slow.info.backend_pid, slower.info.backend_pid]
        # At the main thread, as a terminal's Ctrl-C reaches it: a signal sent to the process may be
        # taken by any of the threads earlier tests left running, and then wake nothing.
        timer = threading.Timer(0.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own handler
        started = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                timer.start()  # inside, so the signal can only land where it is expected
                _fetch_at_once([slower, slow], [_sleep(20), _sleep(10)])
        finally:
            timer.cancel()
            signal.signal(signal.SIGINT, previous)
        assert time.monotonic() - started < 8  # neither statement ran to its end
        with psycopg.connect(pg_dsn, autocommit=True) as watcher:
            rows = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) AND state = 'active'", (pids,)
            ).fetchone()
        assert rows == (0,)
        assert slower.execute("SELECT 42").fetchone() == (42,)
        assert slow.execute("SELECT 43").fetchone() == (43,)


async def test_a_cancelled_async_recall_step_stops_every_statement_it_sent(pg_dsn: str) -> None:
    from memsoda_core.runner.async_runner import _fetch_at_once

    slow = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    slower = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):  # the task is cancelled while it awaits the last statement
            await asyncio.wait_for(_fetch_at_once([slower, slow], [_sleep(20), _sleep(10)]), timeout=0.5)
        assert time.monotonic() - started < 8  # neither statement ran to its end
        assert await (await slower.execute("SELECT 42")).fetchone() == (42,)
    finally:
        await slow.close()
        await slower.close()
