"""memsoda on a real Citus cluster (coordinator + 2 workers): distribution, recall equal to one node,
the settings recall needs on the workers, one shard per statement (from the plans), tenant
isolation, and a worker stopped in the middle of a write."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg.conninfo import conninfo_to_dict
from typer.testing import CliRunner

from memsoda_core import LocalEmbedder, Memory, ScopeArgs, StoreError
from memsoda_core.cli import app
from memsoda_core.distributed import Distribution, distribute, worker_settings
from tests.citus.citus_setup import BIG, SHARD_COUNT

if TYPE_CHECKING:
    from tools.citus import Cluster  # loaded from its file at run time (tools/ is no package)

pytestmark = pytest.mark.citus

FACTS: list[dict[str, Any]] = [
    {"subject": "Maya", "predicate": "works at", "object": "Acme", "object_type": "ORG", "mentions": ["Berlin"]},
    {"subject": "Maya", "predicate": "lives in", "object": "Berlin", "object_type": "PLACE"},
    {"subject": "Maya", "predicate": "likes", "object": "green tea"},
    {"subject": "Maya", "predicate": "manages", "object": "Tom", "object_type": "PERSON"},
    {"subject": "Tom", "predicate": "works on", "object": "the billing service"},
    {"subject": "Acme", "predicate": "is headquartered in", "object": "Berlin", "object_type": "PLACE"},
    {"subject": "Tom", "predicate": "prefers", "object": "Rust over Go"},
    {"subject": "Maya", "predicate": "speaks", "object": "German and English"},
]
QUERIES = ["where does Maya work?", "what does Tom work on", "Berlin", "tea", None]


def new_scope() -> ScopeArgs:
    return {"dataset": f"ds-{uuid.uuid4().hex[:10]}", "project": "proj"}


def summary(memory: Memory, query: str | None, scope: ScopeArgs) -> list[tuple[str, str, str, float]]:
    result = memory.recall(query, **scope)
    return [(s.fact.subject, s.fact.predicate, s.fact.object, round(s.score, 6)) for s in result.facts]


def test_tables_are_distributed_by_tenant_and_colocated(cluster: Cluster, distributed: Distribution) -> None:
    with psycopg.connect(cluster.dsn) as conn:
        rows = conn.execute(
            """SELECT logicalrelid::regclass::text, partmethod, column_to_column_name(logicalrelid, partkey),
                      colocationid
               FROM pg_dist_partition WHERE logicalrelid::regclass::text LIKE 'memsoda.%'"""
        ).fetchall()
    tables = {name.removeprefix("memsoda."): (method, column, group) for name, method, column, group in rows}
    assert tables.pop("meta")[0] == "n"  # a reference table
    assert {"entities", "facts", "fact_entities", "episodes", "scopes", "lexemes", "items"} <= set(tables)
    assert {(method, column) for method, column, _ in tables.values()} == {("h", "dataset")}
    assert len({group for _, _, group in tables.values()}) == 1  # one colocation group
    assert set(distributed.distributed) | set(distributed.unchanged) >= set(tables)
    again = distribute(cluster.dsn, isolate=[BIG])  # idempotent: nothing left to do
    assert (again.distributed, again.reference) == ((), ())
    assert again.isolated == distributed.isolated


def test_the_distribute_command(cluster: Cluster, distributed: Distribution) -> None:
    runner = CliRunner()
    done = runner.invoke(app, ["--dsn", cluster.dsn, "distribute", "--json", "--isolate", BIG])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["distributed"], report["reference"]) == ([], [])
    assert report["isolated"] == {BIG: distributed.isolated[0][1]}
    assert runner.invoke(app, ["distribute"], env={"MEMSODA_DSN": ""}).exit_code == 1  # needs a DSN


def test_the_settings_recall_needs_reach_the_workers(cluster: Cluster, distributed: Distribution) -> None:
    """A coordinator session's SET does not reach the worker that runs a routed statement; the
    role settings `distribute` makes do."""
    assert dict(distributed.settings) == {"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": "100"}
    assert distributed.settings == worker_settings()
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("SET hnsw.ef_search = 7")
        conn.execute("SET hnsw.iterative_scan = off")
        (routed,) = conn.execute(
            """SELECT current_setting('hnsw.ef_search') || ' ' || current_setting('hnsw.iterative_scan')
               FROM memsoda.scopes WHERE dataset = %s LIMIT 1""",
            (BIG,),
        ).fetchall() or [("none",)]
        workers = conn.execute(
            """SELECT result FROM run_command_on_workers(
                   $$SELECT current_setting('hnsw.ef_search') || ' ' || current_setting('hnsw.iterative_scan')$$)"""
        ).fetchall()
    assert workers == [("100 relaxed_order",)] * len(cluster.worker_nodes)
    if routed != ("none",):
        assert routed == ("100 relaxed_order",)


def test_settings_reach_a_routed_knn(citus_memory: Memory, cluster: Cluster) -> None:
    """The kNN of a recall runs on the worker with the database's settings, not pgvector's defaults."""
    scope = new_scope()
    citus_memory.add_facts(FACTS[:2], **scope)
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("SET hnsw.ef_search = 7")
        (row,) = conn.execute(
            """SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')
               FROM memsoda.facts WHERE dataset = %(dataset)s AND project = %(project)s LIMIT 1""",
            scope,
        ).fetchall()
    assert row == ("100", "relaxed_order")


def test_write_and_recall_equal_one_node(citus_memory: Memory, pg_dsn: str, embedder: LocalEmbedder) -> None:
    scope = new_scope()
    with Memory.open(pg_dsn, embedder) as single:
        single.add_facts(FACTS, **scope)
        citus_memory.add_facts(FACTS, **scope)
        single.add_facts(FACTS[:3], **scope)  # a repeated write reconciles the same way
        citus_memory.add_facts(FACTS[:3], **scope)
        for query in QUERIES:
            expected = summary(single, query, scope)
            assert expected, query
            assert summary(citus_memory, query, scope) == expected, query
        assert citus_memory.stats(**scope) == single.stats(**scope)


# --- one shard per statement, from the plans -------------------------------------------------------------

NOT_ROUTED: dict[str, re.Pattern[str]] = {}
"""Statements memsoda sends for a recall or a write that are not router plans, each with its reason.
None today: on a distributed store the writes insert multi-row VALUES with the tenant bound in
every row (`writing.inserts`), and a large scope's tenant-index check reads its row on its shard and
the coordinator's catalog in two steps. Statements that touch no shard run on the coordinator
alone ("coordinator only"): the catalog reads of tenant indexes and the items' advisory locks
(`store.items.lock_items`, taken there by every item writer). Forget's scope lock reads the
scope's row, so it runs on the tenant's worker, where the writers take their relation locks."""


class Sent(list[tuple[Any, Any]]):
    """The statements sent to the coordinator, with their parameters; `elsewhere`: those read
    straight from a worker, with its port (`ReadOnNode`)."""

    def __init__(self) -> None:
        super().__init__()
        self.elsewhere: list[tuple[Any, Any, int]] = []


@contextmanager
def statements_sent(dsn: str) -> Iterator[Sent]:
    """Every statement a sync Memory sends (with its parameters) while inside: to the server at
    `dsn` (the coordinator), and `elsewhere`."""
    sent = Sent()
    original = psycopg.Cursor.execute
    port = int(str(conninfo_to_dict(dsn)["port"]))

    def record(self: psycopg.Cursor[Any], query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query.decode() if isinstance(query, bytes) else query  # bytes: compiled
        if self.connection.info.port == port:
            sent.append((text, params))
        else:
            sent.elsewhere.append((text, params, self.connection.info.port))
        return original(self, query, params, **kwargs)

    psycopg.Cursor.execute = record  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]


def plan_kind(conn: psycopg.Connection[Any], text: str, params: Any) -> str:
    """'router' (one task on one shard), 'one shard, N steps', 'fan-out: N tasks', 'coordinator only'."""
    try:
        cursor = psycopg.RawCursor(conn) if isinstance(params, tuple) else conn.cursor()  # tuple: compiled, $n
        plan = "\n".join(row[0] for row in cursor.execute("EXPLAIN " + text, params).fetchall())
        if "Could not get remote plan" in plan:
            # Citus cannot EXPLAIN a multi-row VALUES insert's bound parameters on the worker (running
            # it binds them on the coordinator first): the same statement with its values inlined
            client = psycopg.ClientCursor(conn)
            plan = "\n".join(row[0] for row in client.execute("EXPLAIN " + text, params).fetchall())
    except psycopg.Error as exc:
        return f"explain failed: {str(exc).splitlines()[0]}"
    tasks = [int(count) for count in re.findall(r"Task Count: (\d+)", plan)]
    if any(count > 1 for count in tasks):
        return f"fan-out: {max(tasks)} tasks"
    if "Citus" not in plan:
        return "coordinator only"
    if tasks == [1] and re.search(r"Task\n\s+Node: ", plan):
        return "router"
    return f"one shard, {max(len(tasks), 2)} steps"


def plans(cluster: Cluster, sent: list[tuple[Any, Any]]) -> dict[str, str]:
    kinds: dict[str, str] = {}
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:  # EXPLAIN alone runs nothing
        register_vector(conn)
        for query, params in sent:
            text = query if isinstance(query, str) else query.as_string(conn)
            flat = " ".join(text.split())
            if re.match(r"(SET|RESET|BEGIN|COMMIT|ROLLBACK|SELECT 1\b)", flat, re.IGNORECASE):
                continue
            kinds[flat] = plan_kind(conn, text, params)
    return kinds


def check_routing(kinds: dict[str, str], may_not_route: Callable[[str], bool]) -> None:
    assert kinds
    fanned = {text: kind for text, kind in kinds.items() if kind.startswith("fan-out")}
    unexpected = {text: kind for text, kind in kinds.items() if kind != "router" and not may_not_route(text)}
    assert unexpected == {}, "statements newly not routed to one shard"
    assert fanned == {}, "no statement may run on every shard"


def _known(text: str) -> bool:
    return any(pattern.match(text) for pattern in NOT_ROUTED.values())


def test_recall_statements_are_routed_to_one_shard(citus_memory: Memory, cluster: Cluster) -> None:
    scope = new_scope()
    citus_memory.add_facts(FACTS, **scope)
    with statements_sent(cluster.dsn) as sent:
        assert citus_memory.recall("where does Maya work?", **scope).facts
        assert citus_memory.recall(None, **scope).facts
    kinds = plans(cluster, sent)
    print("\nrecall plans:", *(f"  {kind:28} {text[:100]}" for text, kind in kinds.items()), sep="\n")
    check_routing(kinds, lambda text: _known(text) or kinds[text] == "coordinator only")  # + where its shards are
    assert sum(kind == "router" for kind in kinds.values()) >= 1  # the scope's size
    # its hits, read straight from its shards on the worker that holds them
    hits = [port for text, _, port in sent.elsewhere if isinstance(text, str) and text.lstrip().startswith("WITH")]
    assert len(hits) == 2 and set(hits) <= {node.port for node in cluster.worker_nodes}


def test_write_statements_stay_on_one_shard(citus_memory: Memory, cluster: Cluster) -> None:
    scope = new_scope()
    citus_memory.add_facts(FACTS[:1], **scope)
    with statements_sent(cluster.dsn) as sent:
        citus_memory.add_facts(FACTS[1:], **scope)
    kinds = plans(cluster, sent)
    print("\nwrite plans:", *(f"  {kind:28} {text[:100]}" for text, kind in kinds.items()), sep="\n")
    check_routing(kinds, lambda text: _known(text) or kinds[text] == "coordinator only")
    assert not any(kind.startswith("fan-out") for kind in kinds.values())
    # the relations' locks, on the tenant's worker, where `forget` and `set_single_valued` take theirs
    locks = [kind for text, kind in kinds.items() if "pg_advisory_xact_lock(k.scope_key" in text]
    assert locks == ["router"]


# --- isolation and faults ---------------------------------------------------------------------------------


def test_a_large_tenant_has_a_shard_of_its_own(
    citus_memory: Memory, cluster: Cluster, distributed: Distribution
) -> None:
    scope: ScopeArgs = {"dataset": BIG, "project": "proj"}
    many = [{"subject": f"Item {n}", "predicate": "is stored in", "object": f"bin {n % 7}"} for n in range(25)]
    citus_memory.add_facts(many, **scope)
    assert citus_memory.recall("where is item 3 stored", **scope).facts
    ((tenant, shard),) = distributed.isolated
    with psycopg.connect(cluster.dsn) as conn:
        (alone,) = conn.execute(
            "SELECT shardminvalue = shardmaxvalue FROM pg_dist_shard WHERE shardid = %s", (shard,)
        ).fetchone() or (False,)
        shards = conn.execute(
            """SELECT count(*) FROM pg_dist_shard s JOIN pg_dist_partition p USING (logicalrelid)
               WHERE logicalrelid::regclass::text LIKE 'memsoda.%%' AND p.partmethod = 'h'
                 AND s.shardid = get_shard_id_for_distribution_column(logicalrelid, %s::text)
                 AND s.shardminvalue = s.shardmaxvalue""",
            (tenant,),
        ).fetchone()
    assert tenant == BIG and alone
    assert shards is not None and shards[0] >= 6  # every colocated table moved along (CASCADE)
    assert SHARD_COUNT >= 2


def _worker_of(cluster: Cluster, scope: ScopeArgs) -> Any:
    with psycopg.connect(cluster.dsn) as conn:
        row = conn.execute(
            """SELECT nodeport FROM pg_dist_shard_placement
               WHERE shardid = get_shard_id_for_distribution_column('memsoda.facts', %s::text)""",
            (scope["dataset"],),
        ).fetchone()
    assert row is not None
    (node,) = [node for node in cluster.worker_nodes if node.port == row[0]]
    return node


def test_a_worker_stopped_mid_write_leaves_nothing_and_the_memory_recovers(
    citus_memory: Memory, cluster: Cluster
) -> None:
    scope = new_scope()
    citus_memory.add_facts(FACTS[:1], **scope)
    node = _worker_of(cluster, scope)
    original = psycopg.Cursor.execute
    stopped: list[bool] = []

    def stop_after_facts(self: psycopg.Cursor[Any], query: Any, params: Any = None, **kwargs: Any) -> Any:
        result = original(self, query, params, **kwargs)
        text = query.decode() if isinstance(query, bytes) else query.as_string(self.connection)
        if not stopped and 'INSERT INTO "memsoda".facts ' in text:
            cluster.stop_node(node)  # the facts are sent, not committed: the worker dies in between
            stopped.append(True)
        return result

    psycopg.Cursor.execute = stop_after_facts  # type: ignore[method-assign]
    try:
        with pytest.raises(StoreError):
            citus_memory.add_facts(FACTS[1:], **scope)
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]
        if not stopped:
            pytest.fail("the write never sent its facts")
        cluster.start_node(node)
    (counts,) = citus_memory.stats(**scope)
    assert counts["facts"] == 1  # nothing of the failed write
    assert [s.fact.object for s in citus_memory.recall(None, **scope).facts] == ["acme"]
    citus_memory.add_facts(FACTS[1:], **scope)  # the same Memory works again
    (counts,) = citus_memory.stats(**scope)
    assert counts["facts"] == len(FACTS)


def test_an_indexed_tenant_recalls(cluster: Cluster, distributed: Distribution, embedder: LocalEmbedder) -> None:
    """An indexed scope's own statements (its name where its partial indexes must match) run on a
    distributed store, planned afresh, and each is routed to the scope's shard. Last in this file:
    it lowers the store's tenant-index threshold."""
    scope = new_scope()
    with Memory.open(cluster.dsn, embedder, tenant_index_min_facts=20) as memory:
        many = [{"subject": f"Item {n}", "predicate": "is stored in", "object": f"bin {n % 7}"} for n in range(25)]
        memory.add_facts(many, **scope)  # past the threshold: the scope's own indexes, built on its shard
        memory.maintain()
        assert memory.info.layout == "citus"
        result = memory.recall("where is item 3 stored", **scope)
        assert result.facts and not result.degraded
        assert any(f.fact.subject == "item 3" for f in result.facts)


def test_langgraph_items_on_citus(citus_memory: Memory, cluster: Cluster) -> None:
    """Items (schema v7) live on their tenant's shard: writes with their facts, gets and recalls are
    routed; a prefix over several datasets and a namespace listing run across shards."""
    from memsoda_langgraph import MemsodaStore

    store = MemsodaStore(citus_memory, project="citus-items")
    ann, ben = ("memories", "ann"), ("memories", "ben")
    with statements_sent(cluster.dsn) as sent:
        store.put(ann, "1", {"content": "Ann plays the cello"})
        store.put(ben, "1", {"content": "Ben plays the drums"})
        store.put(ann, "1", {"content": "Ann plays the viola"})
        item = store.get(ann, "1")
        assert item is not None and item.value == {"content": "Ann plays the viola"}
        assert [i.value["content"] for i in store.search(ann, query="which instrument?")] == ["Ann plays the viola"]
    kinds = plans(cluster, sent)
    print("\nitem plans:", *(f"  {kind:28} {text[:100]}" for text, kind in kinds.items()), sep="\n")
    check_routing(kinds, lambda text: _known(text) or kinds[text] == "coordinator only")
    assert store.search(("memories",), query="drums")[0].namespace == ben
    assert store.list_namespaces(prefix=("memories",)) == [ann, ben]
    store.delete(ben, "1")
    assert store.list_namespaces(prefix=("memories",)) == [ann]


def test_remember_on_citus_stays_on_one_shard(citus_memory: Memory, cluster: Cluster) -> None:
    from tests.scripted_extractor import ScriptedExtractor, add, answer, supersede

    scope = new_scope()
    (old,) = citus_memory.add_facts(
        [{"subject": "user", "predicate": "lives in", "object": "amsterdam", "valid_at": "2020-01-01"}], **scope
    )
    window = [{"role": "user", "content": "I moved to Utrecht and I play the cello.", "id": "m1"}]
    extractor = ScriptedExtractor(
        answer(
            supersede(old, "user", "lives in", "utrecht", "I moved to Utrecht", valid_at="2026-02-01"),
            add("I", "plays", "the cello", "I play the cello"),
        )
    )
    with statements_sent(cluster.dsn) as sent:
        result = citus_memory.remember(window, **scope, thread_id="t-1", extractor=extractor)
    assert len(result.added) == 2 and result.superseded == ((old, result.added[0]),)
    assert [s.message_id for s in citus_memory.sources(result.added[1], **scope)] == ["m1"]
    assert [f.object for f in citus_memory.list_facts(**scope, predicate="lives in").facts] == ["utrecht"]
    kinds = plans(cluster, sent)
    check_routing(kinds, lambda text: _known(text) or kinds[text] == "coordinator only")


def test_forget_on_citus_stays_on_one_shard(citus_memory: Memory, cluster: Cluster) -> None:
    scope = new_scope()
    citus_memory.add_facts(FACTS, **scope)
    citus_memory.add_episodes([{"text": "Maya talked about Berlin", "thread_id": "t-1"}], **scope)
    with statements_sent(cluster.dsn) as sent:
        assert citus_memory.forget(**scope, entity="Tom") == 3
        assert citus_memory.forget(**scope) == len(FACTS) - 3
    kinds = plans(cluster, sent)
    print("\nforget plans:", *(f"  {kind:28} {text[:100]}" for text, kind in kinds.items()), sep="\n")
    check_routing(kinds, lambda text: _known(text) or kinds[text] == "coordinator only")
    (scope_lock,) = [kind for text, kind in kinds.items() if "generate_series(0," in text]
    assert scope_lock == "router"  # on the tenant's worker, where the writers take their locks
    assert citus_memory.stats(**scope) == []
