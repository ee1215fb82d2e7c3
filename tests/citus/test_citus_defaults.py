"""A store distributed at the cluster's defaults (`citus.shard_count`, no tenant isolated), as
`memsoda distribute` with no options leaves it: recall's statements, each naming its scope, are
router plans, and so are the plans the coordinator keeps for them (prepared), which stay right
after the tenant moves to a shard of its own."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from pgvector.psycopg import register_vector

from memsoda_core import LocalEmbedder, Memory, MemsodaError, RecallOptions, ScopeArgs
from memsoda_core.distributed import distribute
from memsoda_core.layouts.shards import place_params, place_statement
from memsoda_core.recall.scope_stats import sample_statement
from memsoda_core.runner.policy import PREPARE_ONLY_WHEN_ASKED
from tests.citus.test_citus import FACTS, check_routing, new_scope, plans, statements_sent

if TYPE_CHECKING:
    from tools.citus import Cluster  # loaded from its file at run time (tools/ is no package)

pytestmark = pytest.mark.citus

SCHEMA = "at_defaults"


@pytest.fixture(scope="module")
def default_store(cluster: Cluster, embedder: LocalEmbedder) -> str:
    """The store in `SCHEMA`, made by `Memory.open`, distributed with no options."""
    Memory.open(cluster.dsn, embedder, schema=SCHEMA).close()
    distribute(cluster.dsn, SCHEMA)
    return SCHEMA


@pytest.fixture
def memory(cluster: Cluster, default_store: str, embedder: LocalEmbedder) -> Iterator[Memory]:
    """Every statement through the coordinator (`worker_reads=False`): as a small scope is read
    when its worker cannot be reached, and a large one always."""
    with Memory.open(cluster.dsn, embedder, schema=default_store, worker_reads=False) as opened:
        yield opened


@pytest.fixture
def worker_memory(cluster: Cluster, default_store: str, embedder: LocalEmbedder) -> Iterator[Memory]:
    """As `Memory.open` opens it: a small scope's recall read on the worker holding its shards."""
    with Memory.open(cluster.dsn, embedder, schema=default_store) as opened:
        yield opened


def _recall_statements(memory: Memory, scope: ScopeArgs, dsn: str) -> list[tuple[str, Any]]:
    """The statements (text, parameters) of two recalls of `scope`, with a query and without, that
    keep plans: not the scope's statistics read (`recall.scope_stats`, planned with its values)."""
    with statements_sent(dsn) as sent:
        assert memory.recall("where does Maya work?", **scope).facts
        assert memory.recall(None, **scope).facts
    texts = [(q if isinstance(q, str) else q.as_string(None), params) for q, params in sent]
    statistics = sample_statement(memory.info.schema).as_string(None)
    return [
        (text, params)
        for text, params in texts
        if not re.match(r"\s*(SET|RESET|SELECT 1\b)", text) and text != statistics
    ]


def test_the_cluster_default_shard_count(cluster: Cluster, default_store: str) -> None:
    with psycopg.connect(cluster.dsn) as conn:
        ((default,),) = conn.execute("SELECT current_setting('citus.shard_count')::int").fetchall()
        ((shards,),) = conn.execute(
            "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = %s::regclass", (f"{default_store}.facts",)
        ).fetchall()
    assert shards == default == 32


def test_recall_statements_name_the_scope_and_are_routed(memory: Memory, cluster: Cluster) -> None:
    scope = new_scope()
    memory.add_facts(FACTS, **scope)
    statements = _recall_statements(memory, scope, cluster.dsn)
    hits = [text for text, _ in statements if text.lstrip().startswith("WITH")]
    assert hits and all(f"'{scope['dataset']}'" in text for text in hits)  # the tenant as a literal
    with statements_sent(cluster.dsn) as sent:
        memory.recall("where does Maya work?", **scope)
        memory.recall(None, **scope)
    kinds = plans(cluster, sent)
    check_routing(kinds, lambda text: False)  # every one a router plan, none on all 32 shards


def test_a_small_scope_recall_is_one_statement(memory: Memory, cluster: Cluster) -> None:
    """Once the scope's size and statistics are remembered, a recall of a small scope sends one
    statement: its signals and the kept facts' columns together, with no setting, transaction or
    second read around it (on Citus each statement is parsed and planned again on the worker:
    bench/RESULTS.md, "Where a small tenant's recall goes on Citus")."""
    scope = new_scope()
    memory.add_facts(FACTS, **scope)
    assert memory.recall("where does Maya work?", **scope).facts  # remembers the size and statistics
    with statements_sent(cluster.dsn) as sent:
        assert memory.recall("where does Maya work?", **scope).facts
    (text,) = _besides_layout_checks(sent)
    assert text.lstrip().startswith("WITH") and sent.elsewhere == []  # worker_reads=False


def test_kept_plans_of_recall_statements_are_routed(memory: Memory, cluster: Cluster) -> None:
    """The plans PostgreSQL keeps for prepared statements (generic, planned without the values):
    Citus raises for any that would run on more than one shard (`multi_task_query_log_level`),
    and uses the kept plan (`generic_plans`) rather than planning again."""
    scope = new_scope()
    memory.add_facts(FACTS, **scope)
    statements = _recall_statements(memory, scope, cluster.dsn)
    with psycopg.connect(cluster.dsn, autocommit=True, prepare_threshold=PREPARE_ONLY_WHEN_ASKED) as conn:
        register_vector(conn)
        conn.execute("SET citus.multi_task_query_log_level = 'error'")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for text, params in statements:
            cursor = psycopg.RawCursor(conn) if isinstance(params, tuple) else conn.cursor()  # tuple: compiled, $n
            for _ in range(2):
                cursor.execute(text, params, prepare=True).fetchall()
        kept = conn.execute("SELECT statement, generic_plans FROM pg_prepared_statements").fetchall()
    assert len(kept) == len({text for text, _ in statements})
    assert all(generic >= 2 for _, generic in kept)


def test_a_shared_statement_with_a_bound_tenant_has_no_kept_plan(memory: Memory, cluster: Cluster) -> None:
    """Why each scope names itself: the same statement with the tenant bound cannot be planned
    generically by Citus, so it would be planned at every run."""
    scope = new_scope()
    memory.add_facts(FACTS, **scope)
    statements = _recall_statements(memory, scope, cluster.dsn)
    text, params = next((t, p) for t, p in statements if t.lstrip().startswith("WITH"))
    values = [*params, scope["dataset"], scope["project"]]  # a compiled statement's: by $n
    bound = text.replace(f"'{scope['dataset']}'", f"${len(values) - 1}").replace(
        f"'{scope['project']}'", f"${len(values)}"
    )
    with psycopg.connect(cluster.dsn, autocommit=True, prepare_threshold=PREPARE_ONLY_WHEN_ASKED) as conn:
        register_vector(conn)
        assert psycopg.RawCursor(conn).execute(bound, values).fetchall()  # planned with its values: fine
        conn.execute("SET plan_cache_mode = force_generic_plan")
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="could not create distributed plan"):
            psycopg.RawCursor(conn).execute(bound, values, prepare=True)


def test_kept_plans_stay_right_when_the_tenant_moves(memory: Memory, cluster: Cluster) -> None:
    """A Memory whose connections hold plans routed to a tenant's shard recalls the same facts
    after `distribute --isolate` moved the tenant to a new shard (Citus drops the kept plans)."""
    scope = new_scope()
    memory.add_facts(FACTS, **scope)

    def recalled() -> list[list[int]]:
        return [[s.fact.id for s in memory.recall(query, **scope).facts] for query in ("Maya", None) * 4]

    before = recalled()
    (moved,) = distribute(cluster.dsn, SCHEMA, isolate=[scope["dataset"]], transfer_mode="block_writes").isolated
    assert moved[0] == scope["dataset"]
    assert recalled() == before


def test_the_relevance_floor_is_measured_with_routed_statements(memory: Memory, cluster: Cluster) -> None:
    """`min_relevance` adds two reads (the scope's latest embeddings, the query's typical
    similarity): each names the tenant, so each is a router plan."""
    scope = new_scope()
    memory.add_facts(FACTS, **scope)
    floor = RecallOptions(min_relevance=0.3)
    with statements_sent(cluster.dsn) as sent:
        result = memory.recall("where does Maya work?", **scope, options=floor)
    assert result.facts and result.relevance is not None and result.relevance >= 0.3
    texts = [text if isinstance(text, str) else text.as_string(None) for text, _ in sent]
    assert any("percentile_cont" in text for text in texts)  # the typical similarity was read here
    check_routing(plans(cluster, sent), lambda text: False)  # not even where its shards are: not read


def _besides_layout_checks(sent: list[tuple[Any, Any]]) -> list[str]:
    """The statements sent but the layout generation's read (an open Memory's, at most once a
    second: `layouts.generation`)."""
    texts = [text if isinstance(text, str) else text.as_string(None) for text, _ in sent]
    return [text for text in texts if "layout_generation" not in text]


def _facts(memory: Memory, scope: ScopeArgs) -> list[list[tuple[int, float]]]:
    return [
        [(s.fact.id, round(s.score, 9)) for s in memory.recall(query, **scope).facts]
        for query in ("where does Maya work?", "Tom", None)
    ]


def _shard_relations(cluster: Cluster, dataset: str) -> set[str]:
    """The names of the dataset's shards of the tables a recall reads, from the coordinator."""
    with psycopg.connect(cluster.dsn) as conn:
        rows = conn.execute(place_statement(SCHEMA), place_params(dataset)).fetchall()
    return {row[2] for row in rows}


def test_a_small_scope_is_read_on_the_worker_holding_its_shards(
    worker_memory: Memory, memory: Memory, cluster: Cluster
) -> None:
    """Once its size and place are remembered, a small scope's recall sends nothing to the
    coordinator: one statement, on the worker, naming the scope's shards with the tenant bound (so
    one kept plan serves every tenant of a shard); the same facts and scores as through the
    coordinator."""
    scope = new_scope()
    worker_memory.add_facts(FACTS, **scope)
    assert _facts(worker_memory, scope) == _facts(memory, scope)
    with statements_sent(cluster.dsn) as sent:
        assert worker_memory.recall("where does Maya work?", **scope).facts
    assert _besides_layout_checks(sent) == []
    ((text, params, port),) = sent.elsewhere
    assert port in {node.port for node in cluster.worker_nodes}
    assert f"'{scope['dataset']}'" not in text and any(isinstance(p, str) and p == scope["dataset"] for p in params)
    shards = _shard_relations(cluster, scope["dataset"])
    assert len(shards) == 5 and all(f'"{SCHEMA}"."{shard}"' in text for shard in shards)


def test_a_scope_whose_shards_moved_is_read_where_they_are(worker_memory: Memory, cluster: Cluster) -> None:
    """A Memory that remembers a scope's shards on one worker recalls the same facts after the
    scope moved to a shard of its own (the guard makes the old shards' read return nothing, or
    they are gone): that recall is read through the coordinator, the next ones on the new shards."""
    scope = new_scope()
    worker_memory.add_facts(FACTS, **scope)
    before = _facts(worker_memory, scope)
    old = _shard_relations(cluster, scope["dataset"])
    distribute(cluster.dsn, SCHEMA, isolate=[scope["dataset"]], transfer_mode="block_writes")
    new = _shard_relations(cluster, scope["dataset"])
    assert new.isdisjoint(old)
    assert _facts(worker_memory, scope) == before
    with statements_sent(cluster.dsn) as sent:
        assert _facts(worker_memory, scope) == before
    assert sent.elsewhere and all(any(shard in text for shard in new) for text, _, _ in sent.elsewhere)


def test_the_recall_after_a_write_is_read_on_the_worker_alone(worker_memory: Memory, cluster: Cluster) -> None:
    """A write tells the memory the scope's new size and latest facts and keeps where its shards
    are: the agent's next recall sends nothing to the coordinator. A write that deletes makes it
    read the size (and the sample) again, not the place."""
    scope = new_scope()
    worker_memory.add_facts(FACTS, **scope)
    assert worker_memory.recall("where does Maya work?", **scope).facts  # size, sample and place read
    worker_memory.add_facts([{"subject": "Maya", "predicate": "likes", "object": "tea"}], **scope)
    with statements_sent(cluster.dsn) as sent:
        assert worker_memory.recall("what does Maya like?", **scope).facts
    assert _besides_layout_checks(sent) == []
    assert [port for text, _, port in sent.elsewhere if isinstance(text, str) and text.lstrip().startswith("WITH")]
    worker_memory.forget(**scope, entity="tea")
    with statements_sent(cluster.dsn) as sent:
        assert worker_memory.recall("what does Maya like?", **scope).facts
    texts = _besides_layout_checks(sent)
    assert not any("pg_dist_placement" in text for text in texts)
    assert any("fact_count" in text for text in texts)  # its size
    assert [port for text, _, port in sent.elsewhere if isinstance(text, str) and text.lstrip().startswith("WITH")]


def test_a_worker_without_the_metadata_is_not_read(worker_memory: Memory, cluster: Cluster) -> None:
    """Where a worker holds no synced copy of Citus's metadata (the guard's), its scopes are read
    through the coordinator from the start, not tried and failed at every recall."""
    scope = new_scope()
    worker_memory.add_facts(FACTS, **scope)
    with psycopg.connect(cluster.dsn) as conn:
        rows = conn.execute(place_statement(SCHEMA), place_params(scope["dataset"])).fetchall()
    ((host, port),) = {(row[3], row[4]) for row in rows}
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("SELECT stop_metadata_sync_to_node(%s, %s)", (host, port))
        try:
            worker_memory._context.scope_sizes.forget_all()
            with statements_sent(cluster.dsn) as sent:
                assert worker_memory.recall("where does Maya work?", **scope).facts
            assert sent.elsewhere == []
        finally:
            conn.execute("SELECT start_metadata_sync_to_node(%s, %s)", (host, port))
    worker_memory._context.scope_sizes.forget_all()
    with statements_sent(cluster.dsn) as sent:
        assert worker_memory.recall("where does Maya work?", **scope).facts
    assert sent.elsewhere  # synced again: read there


def test_a_recall_that_rightly_finds_nothing_is_answered_on_the_worker(worker_memory: Memory, cluster: Cluster) -> None:
    """An empty read on the worker is an answer when the guard, read alone after it, still holds:
    nothing goes to the coordinator and the place is kept."""
    scope = new_scope()
    worker_memory.add_facts(FACTS, **scope)
    assert worker_memory.recall("where does Maya work?", **scope).facts  # size and place remembered
    for _ in range(2):
        with statements_sent(cluster.dsn) as sent:
            before = worker_memory.recall("where does Maya work?", known_at=datetime(1990, 1, 1, tzinfo=UTC), **scope)
        assert before.facts == () and _besides_layout_checks(sent) == []
        assert any("pg_dist_local_group" in str(text) for text, _, _ in sent.elsewhere)  # the guard alone


def test_an_empty_scope_whose_shards_moved_is_read_where_they_are(
    worker_memory: Memory, memory: Memory, cluster: Cluster
) -> None:
    """A scope remembered empty, written by another process and then moved to a shard of its own:
    the old shards' read returns nothing (the guard), which is not taken for an answer."""
    scope = new_scope()
    assert not worker_memory.recall("where does Maya work?", **scope).facts  # size 0 and place remembered
    memory.add_facts(FACTS, **scope)
    distribute(cluster.dsn, SCHEMA, isolate=[scope["dataset"]], transfer_mode="block_writes")
    found = worker_memory.recall("where does Maya work?", **scope).facts
    assert [s.fact.id for s in found] == [s.fact.id for s in memory.recall("where does Maya work?", **scope).facts]
    assert found


def test_a_recall_racing_close_opens_no_worker_pool(
    worker_memory: Memory, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`close()` between a recall's coordinator read and its worker read: the recall opens no pool
    to the worker once the memory's pools are closed (it would outlive the memory)."""
    from memsoda_core.recall import operation as recall_operation

    scope = new_scope()
    worker_memory.add_facts(FACTS, **scope)
    worker_memory.recall("where does Maya work?", **scope)
    worker_memory._context.scope_sizes.forget_all()  # the next recall reads its size first
    nodes = worker_memory._runner._nodes
    for pool in nodes.opened():
        pool.close()
    nodes._pools.clear()  # (as if no recall had read on the worker yet)
    original = recall_operation._read_direct

    def close_first(*args: Any, **kwargs: Any) -> Any:
        with ThreadPoolExecutor(1) as other:
            other.submit(worker_memory.close).result(timeout=30)
        return (yield from original(*args, **kwargs))

    monkeypatch.setattr(recall_operation, "_read_direct", close_first)
    with contextlib.suppress(MemsodaError):  # its connection to the coordinator, already lent, may finish it
        worker_memory.recall("where does Maya work?", **scope)
    assert nodes.opened() == []
