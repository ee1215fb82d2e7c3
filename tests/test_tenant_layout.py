"""The partitioned tenant layout (`store.layout`): a large tenant moves to partitions of its own,
online, all or nothing; recall and writes find its rows wherever they are."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memsoda_core import ConfigurationError, LocalEmbedder, Memory, RecallOptions
from memsoda_core.runner.compiled import Compiled
from memsoda_core.store import layout as sql_layout
from memsoda_core.store.schema import bump_layout_generation_statement
from memsoda_core.store.tenant_index import tenant_indexes
from memsoda_core.validation import Scope
from tests.helpers import generic_plan, plan_nodes

THRESHOLD = 12
BIG = Scope(dataset="user-big", project="p")
TENANT_RELATION = re.compile(r"_[td][0-9a-f]{16}")
"""In the name of a tenant's own partitions and their indexes (`store.layout.tenant_tables`)."""


def _facts(n: int, offset: int = 0) -> list[dict[str, Any]]:
    return [
        {"subject": f"Person{(i + offset) % 5}", "predicate": "visited", "object": f"Town{i + offset}"}
        for i in range(n)
    ]


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    name = f"layout_{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def memory(pg_dsn: str, embedder: LocalEmbedder, schema: str) -> Iterator[Memory]:
    with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD) as opened:
        yield opened


def _rows(conn: psycopg.Connection[Any], schema: str, table: str, scope: Scope) -> int:
    statement = sql.SQL("SELECT count(*) FROM {}.{} WHERE dataset = %s AND project = %s").format(
        sql.Identifier(schema), sql.Identifier(table)
    )
    return int(conn.execute(statement, (scope.dataset, scope.project)).fetchone()[0])  # type: ignore[index]


def _moved(conn: psycopg.Connection[Any], schema: str) -> set[tuple[str, str]]:
    rows = conn.execute(sql.SQL("SELECT dataset, project FROM {}.tenant_partitions").format(sql.Identifier(schema)))
    return {(str(d), str(p)) for d, p in rows}


def _valid(conn: psycopg.Connection[Any], schema: str, names: list[str]) -> dict[str, bool]:
    rows = conn.execute(
        """SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = ANY(%s)""",
        (schema, names),
    )
    return {str(name): bool(valid) for name, valid in rows}


def _texts(memory: Memory, query: str, scope: Scope) -> list[str]:
    return [f"{s.fact.subject} {s.fact.predicate} {s.fact.object}" for s in memory.recall(query, **vars(scope)).facts]


def test_a_new_store_is_partitioned_and_a_large_tenant_moves_with_its_rows(
    memory: Memory, pg_dsn: str, embedder: LocalEmbedder, schema: str
) -> None:
    assert memory.info.layout == "partitioned"
    memory.add_facts(_facts(THRESHOLD - 1), **vars(BIG))
    small = Scope(dataset="user-small", project="p")
    memory.add_facts(_facts(3), **vars(small))
    before = _texts(memory, "who visited Town3?", BIG)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _moved(conn, schema) == set()
        memory.add_facts(_facts(2, offset=50), **vars(BIG))  # crosses the threshold: the write moves it
        assert _moved(conn, schema) == {(BIG.dataset, BIG.project)}
        leaf = sql_layout.tenant_tables("facts", BIG).leaf
        assert _rows(conn, schema, leaf, BIG) == THRESHOLD + 1
        for table in sql_layout.PARTITIONED:
            assert _rows(conn, schema, sql_layout.shared(table), BIG) == 0  # nothing left behind
        assert _rows(conn, schema, "facts_shared", small) == 3  # the small tenant stays
        names = [index.name for index in sql_layout.leaf_indexes(BIG)]
        assert _valid(conn, schema, names) == dict.fromkeys(names, True)
        entities = f"{schema}.{sql_layout.tenant_tables('entities', BIG).leaf}"
        (options,) = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (entities,)).fetchone()  # type: ignore[misc]
        assert options == ["fillfactor=50"]  # like entities_shared: room for HOT count bumps
        (n_fks,) = conn.execute(  # every leaf's foreign keys point to a leaf of the same tenant
            """SELECT count(*) FROM pg_constraint k JOIN pg_class r ON r.oid = k.confrelid
               WHERE k.contype = 'f' AND k.conrelid::regclass::text LIKE %s AND r.relname LIKE %s""",
            (f"{schema}.%\\_t%", "%\\_t%"),
        ).fetchone()  # type: ignore[misc]
        assert n_fks == len(sql_layout.FOREIGN_KEYS)
    after = _texts(memory, "who visited Town3?", BIG)
    plain_schema = f"{schema}_plain"  # the same writes into a plain store find the same facts
    try:
        with Memory.open(
            pg_dsn, embedder, schema=plain_schema, tenant_index_min_facts=THRESHOLD, layout="plain"
        ) as plain:
            plain.add_facts(_facts(THRESHOLD - 1), **vars(BIG))
            plain.add_facts(_facts(3), **vars(small))
            assert _texts(plain, "who visited Town3?", BIG) == before
            plain.add_facts(_facts(2, offset=50), **vars(BIG))
            assert _texts(plain, "who visited Town3?", BIG) == after
            assert _texts(memory, "who visited Town1?", small) == _texts(plain, "who visited Town1?", small)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(plain_schema)))
    with Memory.open(pg_dsn, embedder, schema=schema) as other:  # another process, no cached size
        assert _texts(other, "who visited Town3?", BIG) == after


def test_a_moved_tenant_writes_edits_and_forgets_in_its_leaves(memory: Memory, pg_dsn: str, schema: str) -> None:
    ids = memory.add_facts(_facts(THRESHOLD + 2), **vars(BIG))
    superseded = memory.supersede(ids[0], {"subject": "Person0", "predicate": "visited", "object": "Rome"}, **vars(BIG))
    assert memory.get_fact(superseded, **vars(BIG)).object == "rome"
    assert memory.invalidate(ids[1], **vars(BIG))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _rows(conn, schema, sql_layout.tenant_tables("facts", BIG).leaf, BIG) == THRESHOLD + 3
        assert _rows(conn, schema, "facts_shared", BIG) == 0
    assert memory.forget(entity="Person1", **vars(BIG)) > 0
    assert memory.forget(**vars(BIG)) > 0
    assert not memory.recall("who visited Rome?", **vars(BIG)).facts


def test_the_other_projects_of_a_moved_dataset_share_its_rest_partition(
    memory: Memory, pg_dsn: str, embedder: LocalEmbedder, schema: str
) -> None:
    sibling = Scope(dataset=BIG.dataset, project="notes")
    memory.add_facts(_facts(3), **vars(sibling))
    memory.add_facts(_facts(THRESHOLD + 1), **vars(BIG))  # the whole dataset leaves the DEFAULT partitions
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _rows(conn, schema, sql_layout.tenant_tables("facts", BIG).rest, sibling) == 3
    with Memory.open(pg_dsn, embedder, schema=schema) as other:
        assert _texts(other, "who visited Town1?", sibling)  # a placed dataset: the partitioned tables
        other.add_facts(_facts(THRESHOLD, offset=100), **vars(sibling))  # then the sibling grows large too
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _moved(conn, schema) == {(BIG.dataset, BIG.project), (sibling.dataset, sibling.project)}
        assert _rows(conn, schema, sql_layout.tenant_tables("facts", sibling).leaf, sibling) == THRESHOLD + 3
        assert _rows(conn, schema, sql_layout.tenant_tables("facts", sibling).rest, sibling) == 0
    assert len(_texts(memory, "who visited Town101?", sibling)) == 8


def test_a_moved_tenant_s_recall_reads_its_leaves_and_a_sibling_project_the_partitioned_tables(
    memory: Memory,
) -> None:
    from memsoda_core.layouts.partitioned import LAYOUT

    sibling = Scope(dataset=BIG.dataset, project="notes")
    memory.add_facts(_facts(THRESHOLD + 1), **vars(BIG))
    memory.add_facts(_facts(3), **vars(sibling))
    assert _texts(memory, "who visited Town1?", BIG) and _texts(memory, "who visited Town1?", sibling)
    big, small = memory._context.scope_sizes.get(BIG), memory._context.scope_sizes.get(sibling)
    assert big is not None and small is not None
    assert (big.moved, small.moved, small.placed) == (True, False, True)
    assert LAYOUT.access(memory.info, BIG, big).leaves  # its rows are in its leaves: named
    assert not LAYOUT.access(memory.info, sibling, small).leaves  # in its dataset's rest partition


def test_the_relevance_floor_reads_a_moved_tenant_and_a_small_one_alike(memory: Memory) -> None:
    """`min_relevance` reads the scope's latest embeddings from the partitioned tables: a tenant in
    its own leaves and one in its dataset's rest partition are both measured, off topic lower."""
    sibling = Scope(dataset=BIG.dataset, project="notes")
    memory.add_facts(_facts(THRESHOLD + 1), **vars(BIG))
    memory.add_facts(_facts(5), **vars(sibling))
    floor = RecallOptions(min_relevance=0.0)
    for scope in (BIG, sibling):
        near = memory.recall("who visited Town1?", **vars(scope), options=floor).relevance
        far = memory.recall("lattice quantum chromodynamics on GPUs", **vars(scope), options=floor).relevance
        assert near is not None and far is not None and far < near


def test_a_size_remembered_from_before_the_move_still_finds_the_rows(
    memory: Memory, pg_dsn: str, embedder: LocalEmbedder, schema: str
) -> None:
    memory.add_facts(_facts(THRESHOLD - 1), **vars(BIG))
    assert _texts(memory, "who visited Town3?", BIG)  # remembers the size: small, the DEFAULT partitions
    with Memory.open(pg_dsn, embedder, schema=schema) as other:
        other.add_facts(_facts(3, offset=50), **vars(BIG))  # another process moves it
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _rows(conn, schema, "facts_shared", BIG) == 0
    found = memory.recall("who visited Town3?", **vars(BIG)).facts
    assert found and {s.fact.id for s in found} <= {f.id for f in memory.list_facts(**vars(BIG), limit=100).facts}


def test_a_move_waits_for_the_dataset_s_writers_and_a_write_waits_for_the_move(
    memory: Memory, pg_dsn: str, schema: str
) -> None:
    memory.add_facts(_facts(THRESHOLD - 1), **vars(BIG))
    with psycopg.connect(pg_dsn) as writer:  # a write into the dataset, still open
        writer.execute(sql_layout.dataset_lock(schema), {"dataset": BIG.dataset})
        memory.add_facts(_facts(2, offset=50), **vars(BIG))  # crosses; its move gives up (lock timeout)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert _moved(conn, schema) == set()
            assert _rows(conn, schema, "facts_shared", BIG) == THRESHOLD + 1  # nothing moved, nothing lost
        writer.rollback()
    memory.add_facts(_facts(1, offset=90), **vars(BIG))  # the next write moves it
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _moved(conn, schema) == {(BIG.dataset, BIG.project)}
        assert _rows(conn, schema, sql_layout.tenant_tables("facts", BIG).leaf, BIG) == THRESHOLD + 2


def test_writers_racing_a_move_lose_nothing(memory: Memory, pg_dsn: str, embedder: LocalEmbedder, schema: str) -> None:
    memory.add_facts(_facts(THRESHOLD - 2), **vars(BIG))
    errors: list[BaseException] = []
    written: list[int] = []

    def write(n: int) -> None:
        try:
            with Memory.open(pg_dsn, embedder, schema=schema) as own:
                for k in range(4):
                    written.extend(own.add_facts(_facts(1, offset=1000 * (n + 1) + k), **vars(BIG)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    memory.maintain()
    assert errors == []
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _moved(conn, schema) == {(BIG.dataset, BIG.project)}
        assert _rows(conn, schema, sql_layout.tenant_tables("facts", BIG).leaf, BIG) == THRESHOLD - 2 + 12
        assert _rows(conn, schema, "facts_shared", BIG) == 0
    assert len(written) == 12


def test_an_interrupted_move_leaves_the_tenant_where_it_was(memory: Memory, pg_dsn: str, schema: str) -> None:
    memory.add_facts(_facts(THRESHOLD - 1), **vars(BIG))
    blocker = sql_layout.tenant_tables("fact_sources", BIG).dataset  # the move's last table fails to be made
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.{} (x int)").format(sql.Identifier(schema), sql.Identifier(blocker)))
        memory.add_facts(_facts(2, offset=50), **vars(BIG))
        assert _moved(conn, schema) == set()
        assert _rows(conn, schema, "facts_shared", BIG) == THRESHOLD + 1
        made = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname LIKE %s",
            (schema, "%\\_t%"),
        ).fetchone()
        assert made == (0,)  # none of the tables it made is left
        assert _texts(memory, "who visited Town3?", BIG)
        conn.execute(sql.SQL("DROP TABLE {}.{}").format(sql.Identifier(schema), sql.Identifier(blocker)))
    assert list(memory.maintain().indexes) == [index.name for index in sql_layout.leaf_indexes(BIG)]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _moved(conn, schema) == {(BIG.dataset, BIG.project)}


def _write_locks(memory: Memory, pg_dsn: str, scope: Scope) -> set[str]:
    """The relations one fact insert into `scope` locks, in a transaction of its own (as a write
    holds them until its commit), with the dataset's move lock first as memsoda's writes take it."""
    s = sql.Identifier(memory.info.schema)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(sql_layout.dataset_lock(memory.info.schema), {"dataset": scope.dataset})
        conn.execute(
            sql.SQL(
                """INSERT INTO {s}.facts (dataset, project, subject, predicate, object, object_type, subject_id,
                                          anchor_id, valid_at, confidence, embedding)
                   SELECT dataset, project, 'x', 'y', 'z', 'OTHER', subject_id, anchor_id, now(), 1, embedding
                   FROM {s}.facts WHERE dataset = %s AND project = %s LIMIT 1"""
            ).format(s=s),
            (scope.dataset, scope.project),
        )
        rows = conn.execute(
            "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE l.pid = pg_backend_pid()"
        )
        locked = {str(name) for (name,) in rows}
        conn.rollback()
    return locked


@pytest.mark.parametrize("layout", ["partitioned", "plain"])
def test_a_write_into_a_small_tenant_locks_the_same_relations_however_many_tenants_are_large(
    pg_dsn: str, embedder: LocalEmbedder, schema: str, layout: str
) -> None:
    small = Scope(dataset="small", project="p")
    with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, layout=layout) as memory:
        memory.add_facts(_facts(1), **vars(small))
        counts = []
        for first in (0, 3):
            for n in range(first, first + 3):
                memory.add_facts(_facts(THRESHOLD), dataset=f"large-{n}", project="p")
            counts.append(_write_locks(memory, pg_dsn, small))
    if layout == "partitioned":
        assert counts[0] == counts[1] and any(name.startswith("facts_shared") for name in counts[0])
        assert not [name for name in counts[1] if TENANT_RELATION.search(name)]  # no leaf, no dataset partition
    else:  # each large tenant's partial indexes on the shared table: what the partitioned layout removes
        assert len(counts[1]) == len(counts[0]) + 3 * len(tenant_indexes(small))


def test_a_plain_store_from_before_is_partitioned_at_open_and_its_tenants_move_later(
    pg_dsn: str, embedder: LocalEmbedder, schema: str
) -> None:
    with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD, layout="plain") as old:
        ids = old.add_facts(_facts(THRESHOLD + 1), **vars(BIG))  # with partial indexes, as before
        old.add_facts(_facts(2), dataset="small", project="p")
        before = _texts(old, "who visited Town3?", BIG)
    partial = [index.name for index in tenant_indexes(BIG)]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # what a version-8 store looks like
        conn.execute(sql.SQL("DROP TABLE {}.tenant_partitions").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("DROP INDEX {}.facts_ended").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("DROP TABLE {}.retention").format(sql.Identifier(schema)))  # and version 11's
        conn.execute(sql.SQL("DROP INDEX {}.items_expiring").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL("ALTER TABLE {}.items DROP COLUMN ttl_minutes, DROP COLUMN expires_at").format(
                sql.Identifier(schema)
            )
        )
        conn.execute(sql.SQL("ALTER TABLE {}.facts DROP COLUMN item_owned").format(sql.Identifier(schema)))  # v13
        conn.execute(sql.SQL("DELETE FROM {}.meta WHERE key = 'layout'").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL("UPDATE {}.meta SET value = '8' WHERE key = 'schema_version'").format(sql.Identifier(schema))
        )
        assert _valid(conn, schema, partial) == dict.fromkeys(partial, True)
    with Memory.open(pg_dsn, embedder, schema=schema) as memory:
        assert memory.info.layout == "partitioned"
        assert _texts(memory, "who visited Town3?", BIG) == before  # served by its partial indexes meanwhile
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert _moved(conn, schema) == set() and _rows(conn, schema, "facts_shared", BIG) == THRESHOLD + 1
        (new,) = memory.add_facts(_facts(1, offset=70), **vars(BIG))  # the next write moves it
        assert new > max(ids)  # the ids go on from the old sequence
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert _moved(conn, schema) == {(BIG.dataset, BIG.project)}
            assert _valid(conn, schema, partial) == {}  # its partial indexes are dropped
        assert _texts(memory, "who visited Town3?", BIG)[0] == before[0] == "person3 visited town3"
        assert memory.add_facts(_facts(1, offset=80), dataset="small", project="p")


def test_the_layout_is_chosen_once(pg_dsn: str, embedder: LocalEmbedder, schema: str) -> None:
    with pytest.raises(ConfigurationError, match="layout must be one of"):
        Memory.open(pg_dsn, embedder, schema=schema, layout="sharded")
    with Memory.open(pg_dsn, embedder, schema=schema, layout="plain") as memory:
        assert memory.info.layout != "partitioned"
    with pytest.raises(ConfigurationError, match="has the plain layout"):
        Memory.open(pg_dsn, embedder, schema=schema, layout="partitioned")


def test_unpartitioning_a_store_no_tenant_left_gives_back_plain_tables(
    memory: Memory, pg_dsn: str, embedder: LocalEmbedder, schema: str
) -> None:
    (first,) = memory.add_facts(_facts(1), dataset="d", project="p")
    memory.close()
    with psycopg.connect(pg_dsn) as conn:
        for statement in sql_layout.unpartition_statements(schema):
            conn.execute(statement)
        conn.execute(sql.SQL("UPDATE {}.meta SET value = 'plain' WHERE key = 'layout'").format(sql.Identifier(schema)))
        conn.commit()
        kinds: dict[str, str] = dict(
            conn.execute(
                "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname = ANY(%s)",
                (schema, list(sql_layout.PARTITIONED)),
            ).fetchall()
        )
    assert kinds == dict.fromkeys(sql_layout.PARTITIONED, "r")
    with Memory.open(pg_dsn, embedder, schema=schema) as plain:
        assert plain.info.layout != "partitioned"
        (second,) = plain.add_facts(_facts(1, offset=5), dataset="d", project="p")
        assert second > first and len(plain.list_facts(dataset="d", project="p").facts) == 2


def test_readers_and_writers_of_other_tenants_never_fail_while_tenants_move(
    memory: Memory, pg_dsn: str, embedder: LocalEmbedder, schema: str
) -> None:
    small = [Scope(dataset=f"small-{n}", project="p") for n in range(4)]
    for scope in small:
        memory.add_facts(_facts(3), **vars(scope))
    errors: list[BaseException] = []
    stop = threading.Event()

    def busy(n: int) -> None:
        with Memory.open(pg_dsn, embedder, schema=schema) as own:
            k = 0
            while not stop.is_set():
                scope = small[(n + k) % len(small)]
                try:
                    if k % 3 == 0:  # into a tenant of its own each time: none grows large
                        own.add_facts(_facts(1), dataset=f"new-{n}-{k}", project="p")
                    else:
                        assert own.recall("who visited Town1?", **vars(scope)).facts
                except BaseException as exc:
                    errors.append(exc)
                k += 1

    threads = [threading.Thread(target=busy, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    try:
        for n in range(4):  # four tenants grow large, each moving while the others read and write
            memory.add_facts(_facts(THRESHOLD + 1), dataset=f"growing-{n}", project="p")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    memory.maintain()  # a move that gave up under the load (tried again at the next write) is done here
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert {d for d, _ in _moved(conn, schema)} == {f"growing-{n}" for n in range(4)}


def _generic_plan_relations(conn: psycopg.Connection[Any], statement: Compiled) -> set[str]:
    """The relations in PostgreSQL's generic plan of a rendered recall statement (as recall keeps it)."""
    return {str(node["Relation Name"]) for node in plan_nodes(generic_plan(conn, statement)) if "Relation Name" in node}


@pytest.mark.parametrize("which", ["moved", "leaves", "small"])
def test_the_plans_recall_keeps_hold_one_tenant_s_partitions_only(memory: Memory, pg_dsn: str, which: str) -> None:
    from memsoda_core.layouts.access import ScopeAccess
    from memsoda_core.recall.signals import SIGNAL_NAMES, RecallPlan
    from memsoda_core.recall.statements import facts_statement, recall_statements

    for n in range(3):
        memory.add_facts(_facts(THRESHOLD + 1), dataset=f"large-{n}", project="p")
    scope = Scope(dataset="large-1", project="p") if which == "moved" else Scope(dataset="small", project="p")
    memory.add_facts(_facts(2), **vars(scope))
    every = RecallPlan(query=True, embedding=True, hops=memory.options.anchor.hops, signals=frozenset(SIGNAL_NAMES))
    plans = [
        every,
        RecallPlan(query=False, embedding=False, signals=frozenset({"recent"})),
    ]  # every signal; recency alone
    schema = memory.info.schema
    own, default = ScopeAccess(named=scope, kept_named=scope), ScopeAccess(default_partitions=True)
    access = own if which == "moved" else default
    if which == "leaves":
        scope = Scope(dataset="large-1", project="p")
        access = ScopeAccess(named=scope, kept_named=scope, leaves=True)
        which = "moved"
    statements = [st for p in plans for st in recall_statements(schema, p, access)]
    statements.append(facts_statement(schema, access))
    if access.leaves:  # no partitioned table named: its leaves only
        text = b" ".join(statement.query for statement in statements).decode()
        named = set(re.findall(rf'"{schema}"\.(\w+)', text))
        assert named & set(sql_layout.PARTITIONED) == set()
        assert {sql_layout.tenant_tables(t, scope).leaf for t in ("facts", "entities", "fact_entities")} <= named
    with psycopg.connect(pg_dsn) as conn:
        relations = set().union(*(_generic_plan_relations(conn, statement) for statement in statements))
    tenant_relations = {name for name in relations if TENANT_RELATION.search(name)}
    if which == "moved":
        own_leaves = {sql_layout.tenant_tables(table, scope).leaf for table in sql_layout.PARTITIONED}
        assert tenant_relations and tenant_relations <= own_leaves  # no other tenant's partition is in the plan
    else:
        assert tenant_relations == set() and "facts_shared" in relations


def test_doctor_checks_that_large_tenants_have_their_partitions(memory: Memory, pg_dsn: str, schema: str) -> None:
    from memsoda_core.cli.doctor import _tenant_index_check

    memory.add_facts(_facts(THRESHOLD + 1), **vars(BIG))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        meta = {
            str(k): str(v)
            for k, v in conn.execute(sql.SQL("SELECT key, value FROM {}.meta").format(sql.Identifier(schema)))
        }
        assert _tenant_index_check(conn, schema, meta).status == "ok"
        leaf = sql_layout.leaf_indexes(BIG)[0]
        conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(leaf.name)))
        check = _tenant_index_check(conn, schema, meta)
        assert check.status == "warn" and leaf.name in check.detail


def test_a_role_that_may_not_skip_checks_still_moves_a_tenant(
    pg_dsn: str, embedder: LocalEmbedder, schema: str
) -> None:
    """The move's `deadlock_timeout` and foreign-key-off settings need the SET privilege on them; a
    plain role's move falls back to a short lock timeout and checked deletes, and still moves."""
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        (superuser,) = admin.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()  # type: ignore[misc]
        if not superuser:
            pytest.skip("needs a superuser to make a plain role")
        admin.execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memsoda_plain_role')"
            " THEN CREATE ROLE memsoda_plain_role LOGIN; END IF; END $$"
        )
        admin.execute("CREATE EXTENSION IF NOT EXISTS vector")  # a plain role may not create it
        admin.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO memsoda_plain_role").format(sql.Identifier(admin.info.dbname))
        )
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, user="memsoda_plain_role", password="")
    with psycopg.connect(dsn) as conn:
        privileges = conn.execute(
            "SELECT has_parameter_privilege('deadlock_timeout', 'SET'),"
            " has_parameter_privilege('session_replication_role', 'SET')"
        ).fetchone()
    assert privileges == (False, False)
    with Memory.open(dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD) as memory:
        memory.add_facts(_facts(THRESHOLD + 1), **vars(BIG))
        assert _texts(memory, "who visited Town3?", BIG)[0] == "person3 visited town3"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _moved(conn, schema) == {(BIG.dataset, BIG.project)}
        assert _rows(conn, schema, "facts_shared", BIG) == 0


def _recalled(memory: Memory, scope: Scope) -> list[int]:
    return [s.fact.id for s in memory.recall("who visited Town3?", **vars(scope)).facts]


def test_a_memory_open_before_another_process_moves_a_tenant_is_correct_from_its_first_operation(
    memory: Memory, pg_dsn: str, embedder: LocalEmbedder, schema: str
) -> None:
    """The move is per scope (its place is read with its size), so the store's layout generation
    stays; the old Memory's first recall of the moved tenant and of its dataset's other project
    finds what a Memory opened after the move finds, and its writes land where the rows are."""
    sibling = Scope(dataset=BIG.dataset, project="notes")
    memory.add_facts(_facts(THRESHOLD - 1), **vars(BIG))
    memory.add_facts(_facts(4), **vars(sibling))
    assert _recalled(memory, BIG) and _recalled(memory, sibling)  # both remembered as small, in DEFAULT
    with Memory.open(pg_dsn, embedder, schema=schema) as other:
        other.add_facts(_facts(3, offset=50), **vars(BIG))  # another process moves the tenant and its dataset
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert _moved(conn, schema) == {(BIG.dataset, BIG.project)}
        assert _rows(conn, schema, "facts_shared", BIG) == _rows(conn, schema, "facts_shared", sibling) == 0
    found = {scope: _recalled(memory, scope) for scope in (BIG, sibling)}
    with Memory.open(pg_dsn, embedder, schema=schema) as fresh:
        assert fresh.info.layout_generation == memory.info.layout_generation
        for scope, ids in found.items():
            assert ids == _recalled(fresh, scope)
        (written,) = memory.add_facts(_facts(1, offset=200), **vars(sibling))
        assert written in {f.id for f in fresh.list_facts(**vars(sibling), limit=100).facts}
    assert memory.profile(subject="Person3", **vars(BIG)).facts


def _unpartition(pg_dsn: str, schema: str) -> None:
    """What `memsoda distribute` does first to a partitioned store, run by another process."""
    from memsoda_core.distributed import _plain_tables
    from memsoda_core.runner.sync_runner import Runner

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        Runner.run_on(conn, _plain_tables(schema))


@pytest.mark.parametrize("noticed", ["by the generation read", "by the first failed statement"])
def test_a_memory_open_before_its_layout_changes_switches_at_its_first_operation(
    memory: Memory, pg_dsn: str, schema: str, noticed: str
) -> None:
    """Another process turns the partitioned store into plain tables (and bumps the layout
    generation): the open Memory reads its layout again and runs the operation once more with the
    plain forms, whether the generation read before it notices (due every `CHECK_EVERY_S`) or the
    statement reading the DEFAULT partitions, gone, fails first."""
    memory.add_facts(_facts(4), **vars(BIG))
    before = _recalled(memory, BIG)
    assert before and memory.info.layout == "partitioned"
    generation = memory.info.layout_generation
    _unpartition(pg_dsn, schema)
    memory._layout_due = 0.0 if noticed == "by the generation read" else float("inf")
    assert _recalled(memory, BIG) == before
    assert memory.info.layout == "plain" and memory.info.layout_generation == generation + 1
    (new,) = memory.add_facts(_facts(1, offset=9), **vars(BIG))
    assert new in {f.id for f in memory.list_facts(**vars(BIG), limit=100).facts}


def test_a_layout_change_with_nothing_to_fail_is_noticed_by_the_generation_read(
    memory: Memory, pg_dsn: str, schema: str
) -> None:
    """A change that leaves the old statements valid (the generation bumped alone, as by a
    distribute of a plain store) is read before the next due operation, which then runs with the
    store's layout as it is."""
    memory.add_facts(_facts(2), **vars(BIG))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(bump_layout_generation_statement(schema))
    memory._layout_due = 0.0
    assert memory.list_facts(**vars(BIG)).facts
    assert memory.info.layout_generation == 1 and memory.info.layout == "partitioned"


@pytest.mark.parametrize("noticed", ["by the generation read", "by the first failed statement"])
def test_export_switches_when_the_layout_changed_under_it(
    memory: Memory, pg_dsn: str, schema: str, noticed: str, tmp_path: Path
) -> None:
    """`export_jsonl` runs through the same layout check as every operation: after another
    process turned the store into plain tables, it exports from them, each line once (its
    statements read the parent tables, which stay, so only the generation read notices)."""
    memory.add_facts(_facts(4), **vars(BIG))
    _unpartition(pg_dsn, schema)
    memory._layout_due = 0.0 if noticed == "by the generation read" else float("inf")
    path = tmp_path / "big.jsonl"
    lines = memory.export_jsonl(path, **vars(BIG))
    assert memory.info.layout == ("plain" if noticed == "by the generation read" else "partitioned")
    assert lines == len(path.read_text().splitlines()) >= 4


@pytest.mark.parametrize("noticed", ["by the generation read", "by the first failed statement"])
def test_import_switches_when_the_layout_changed_under_it(
    memory: Memory, pg_dsn: str, schema: str, noticed: str, tmp_path: Path
) -> None:
    """`import_jsonl` too: its lines land in the tables as they now are (here each one is a
    fact the scope holds, read from the plain tables and merged; as with the export, only the
    generation read notices this change)."""
    memory.add_facts(_facts(4), **vars(BIG))
    path = tmp_path / "big.jsonl"
    memory.export_jsonl(path, **vars(BIG))
    _unpartition(pg_dsn, schema)
    memory._layout_due = 0.0 if noticed == "by the generation read" else float("inf")
    report = memory.import_jsonl(path, **vars(BIG))
    assert memory.info.layout == ("plain" if noticed == "by the generation read" else "partitioned")
    assert (report.facts, report.facts_merged, report.facts_new) == (4, 4, 0)
    assert len(memory.list_facts(**vars(BIG), limit=100).facts) == 4


def test_reembed_reads_the_layout_before_it_starts(memory: Memory, pg_dsn: str, schema: str) -> None:
    """`reembed` reads the store's layout at once, not when due: after another process turned
    the partitioned store into plain tables, it re-embeds them and the memory goes on with the
    plain forms on the new model."""
    from tests.test_reembed import NewModel

    memory.add_facts(_facts(4), **vars(BIG))
    _unpartition(pg_dsn, schema)
    memory._layout_due = float("inf")
    report = memory.reembed(NewModel())
    assert report.switched and memory.info.layout == "plain"
    with psycopg.connect(pg_dsn) as conn:
        statement = sql.SQL("SELECT count(*) FROM {}.facts WHERE vector_dims(embedding) <> %s").format(
            sql.Identifier(schema)
        )
        assert conn.execute(statement, (report.dimensions,)).fetchone() == (0,)
    assert _texts(memory, "Town3", BIG)[0].lower() == "person3 visited town3"


def test_a_layout_change_during_a_reembed_is_noticed_by_its_switch_which_resumes(
    memory: Memory, pg_dsn: str, schema: str
) -> None:
    """The switch reads the layout generation under its lock: a change committed during the
    passes rolls the switch back, and the re-embed resumes with the layout read again."""
    from tests.test_reembed import NewModel

    memory.add_facts(_facts(4), **vars(BIG))

    def bump_once(texts: list[str]) -> None:
        if model.calls == 1:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(bump_layout_generation_statement(schema))

    model = NewModel(hook=bump_once)
    report = memory.reembed(model)
    assert report.switched and report.resumed
    assert memory.info.layout_generation == 1 and memory.info.model == report.model
    assert _texts(memory, "Town3", BIG)[0].lower() == "person3 visited town3"


def _fails_once_after(handed_out: Any, pg_dsn: str, schema: str, runs: list[int]) -> Any:
    """An operation whose first run hands something out, then meets the store's layout changed
    by another process (its generation bumped) and a statement failing; later runs succeed."""
    from memsoda_core.runner.steps import execute

    def op() -> Any:
        runs.append(len(runs) + 1)
        yield from handed_out
        if len(runs) == 1:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(bump_layout_generation_statement(schema))
            yield from execute(sql.SQL("SELECT 1 / 0"))
        return len(runs)

    return op


def test_an_operation_that_sent_lines_is_not_run_again_when_the_layout_changed(
    memory: Memory, pg_dsn: str, schema: str
) -> None:
    """An export whose first lines already reached the caller's file cannot run again after a
    layout change (the lines would be written twice): `LayoutChangedError`, the lines sent once."""
    from memsoda_core import LayoutChangedError
    from memsoda_core.runner.steps import emit

    memory._layout_due = float("inf")
    written: list[str] = []
    runs: list[int] = []
    with pytest.raises(LayoutChangedError, match="changed meanwhile"):
        memory._run(
            lambda: _fails_once_after(emit(["a", "b"]), pg_dsn, schema, runs)(),
            read_only=True,
            sink=written.extend,
        )
    assert (written, runs) == (["a", "b"], [1])
    assert memory.info.layout_generation == 1


def test_an_operation_run_again_after_a_layout_change_shows_its_progress_once(
    memory: Memory, pg_dsn: str, schema: str
) -> None:
    """An import run again after a layout change (its first run rolled back) counts from zero:
    the caller's progress shows each item once, never past the total."""
    from memsoda_core.runner.steps import progress

    memory._layout_due = float("inf")
    shown: list[int] = []
    runs: list[int] = []
    result = memory._run(lambda: _fails_once_after(progress(3), pg_dsn, schema, runs)(), advance=shown.append)
    assert (result, runs, sum(shown)) == (2, [1, 2], 3)
