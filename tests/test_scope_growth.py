"""A write through a memory updates what it remembers of the scope (its size, its latest facts)
from what the write reports, exactly as a read after it would give, so the next recall reads
neither again (`MemoryContext.growing`)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import class_row

from memsoda_core import Memory, MemsodaError, ScopeArgs, ops
from memsoda_core.embedders.local import LocalEmbedder
from memsoda_core.recall.scope_stats import SAMPLE_FACTS, ScopeSample, sample_of, sample_statement
from memsoda_core.runner import sync_runner
from memsoda_core.runner.steps import Operation, after_commit, execute
from memsoda_core.scope_growth import LatestFact
from memsoda_core.validation import Scope
from tests.conftest import Either

THRESHOLD = 20


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A schema of its own, dropped at the end."""
    name = f"memsoda_growth_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def facts(first: int, count: int) -> list[dict[str, str]]:
    return [
        {"subject": "Maya", "predicate": "noted", "object": f"a long note number {n} about the garden and its plants"}
        for n in range(first, first + count)
    ]


def read_sample(dsn: str, schema: str, scope: ScopeArgs) -> ScopeSample:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=class_row(LatestFact)) as cursor:
        rows = cursor.execute(sample_statement(schema), {**scope, "sample_facts": SAMPLE_FACTS}).fetchall()
    return sample_of(rows)


def read_count(dsn: str, schema: str, scope: ScopeArgs) -> int:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT fact_count FROM {}.scopes WHERE dataset = %(dataset)s AND project = %(project)s")
        ((count,),) = conn.execute(query.format(sql.Identifier(schema)), scope).fetchall()
    return int(count)


async def test_a_write_leaves_the_size_and_sample_a_read_would_give(
    memory: Either, scope: ScopeArgs, pg_dsn: str
) -> None:
    await memory.add_facts(facts(0, 12), **scope)
    await memory.recall("the garden", **scope)  # reads the size and the sample, and remembers them
    context, key = memory.raw._context, Scope(**scope)
    repeated = facts(3, 1)  # written again: counted once more (times_seen)
    ids = await memory.add_facts([*facts(100, 3), *repeated], **scope)
    supersede = await memory.supersede(ids[0], {**facts(200, 1)[0], "object": "a new note"}, **scope)
    assert supersede not in ids
    schema = memory.raw.info.schema
    size, sample = context.scope_sizes.get(key), context.scope_stats.get(key)
    assert size is not None and sample is not None  # updated, not forgotten: the next recall reads neither
    assert size.facts == read_count(pg_dsn, schema, scope) == 16
    assert sample == read_sample(pg_dsn, schema, scope)
    assert [fact.times_seen for fact in sample.latest if fact.times_seen > 1] == [2]


def test_a_write_across_the_threshold_makes_the_size_read_again(
    pg_dsn: str, embedder: LocalEmbedder, schema: str, scope: ScopeArgs
) -> None:
    with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD) as memory:
        memory.add_facts(facts(0, THRESHOLD - 5), **scope)
        memory.recall("the garden", **scope)
        key = Scope(**scope)
        memory.add_facts(facts(100, 2), **scope)
        size = memory._context.scope_sizes.get(key)
        assert size is not None and size.facts == THRESHOLD - 3
        memory.add_facts(facts(200, 5), **scope)  # now over it: its own statements and indexes
        assert memory._context.scope_sizes.get(key) is None
        assert memory._context.scope_stats.get(key) == read_sample(pg_dsn, schema, scope)
        memory.recall("the garden", **scope)
        size = memory._context.scope_sizes.get(key)
        assert size is not None and size.facts == THRESHOLD + 2


def test_forgetting_drops_what_is_remembered(sync_memory: Memory, scope: ScopeArgs) -> None:
    sync_memory.add_facts(facts(0, 5), **scope)
    sync_memory.recall("the garden", **scope)
    sync_memory.forget(**scope, entity="Maya")
    key = Scope(**scope)
    assert sync_memory._context.scope_sizes.get(key) is None and sync_memory._context.scope_stats.get(key) is None


@pytest.fixture
def counted_table(pg_dsn: str) -> Iterator[sql.Identifier]:
    """A table of its own, dropped at the end."""
    name = sql.Identifier(f"after_commit_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(name))
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE {}").format(name))


def test_what_is_remembered_changes_only_once_the_write_has_committed(
    sync_memory: Memory, pg_dsn: str, counted_table: sql.Identifier
) -> None:
    """`steps.AfterCommit`: done after the commit (another connection sees the row then), and never
    for a run that fails, so a write rolled back leaves nothing remembered of it."""
    seen: list[int] = []

    def visible() -> None:
        with psycopg.connect(pg_dsn) as conn:
            ((count,),) = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(counted_table)).fetchall()
        seen.append(int(count))

    def write(fail: bool) -> Operation[None]:
        yield from execute(sql.SQL("INSERT INTO {} VALUES (1)").format(counted_table))
        yield from after_commit(visible)
        if fail:
            yield from execute(sql.SQL("SELECT 1 / 0"))

    sync_memory._runner.run(lambda: write(fail=False))
    assert seen == [1]
    with pytest.raises(MemsodaError):
        sync_memory._runner.run(lambda: write(fail=True))
    assert seen == [1]


def test_a_recall_that_read_before_a_write_committed_remembers_nothing_of_it(
    sync_memory: Memory, scope: ScopeArgs, pg_dsn: str
) -> None:
    """A recall reads the sample, a write begins and commits, then the recall would remember what it
    read: refused, the read may not hold the write (a thread's interleaving, forced)."""
    sync_memory.add_facts(facts(0, 5), **scope)
    key, cache = Scope(**scope), sync_memory._context.scope_stats
    read_done, write_done = threading.Event(), threading.Event()
    original_put = cache.put

    def late_put(where: Scope, value: Any, read_at: int | None = None) -> None:
        read_done.set()
        write_done.wait(30)
        original_put(where, value, read_at)

    cache.put = late_put  # type: ignore[method-assign,assignment]
    recall = threading.Thread(target=lambda: sync_memory.recall("the garden", **scope))
    recall.start()
    assert read_done.wait(30)
    cache.put = original_put  # type: ignore[method-assign]
    sync_memory.add_facts(facts(100, 3), **scope)
    write_done.set()
    recall.join(30)
    remembered = cache.get(key)
    assert remembered is None or remembered == read_sample(pg_dsn, sync_memory.info.schema, scope)


def test_a_recall_after_the_commit_but_before_the_report_is_not_grown_again(
    pg_dsn: str, embedder: LocalEmbedder, schema: str, scope: ScopeArgs
) -> None:
    """A recall between the write's commit and its report reads the write's facts already: the
    report must not add them (or their repeats) a second time."""
    with Memory.open(pg_dsn, embedder, schema=schema) as memory:
        memory.add_facts(facts(0, 5), **scope)
        key = Scope(**scope)

        def recall() -> None:
            memory.recall("the garden", **scope)

        def write() -> Operation[list[int]]:
            yield from after_commit(recall)  # first after the commit
            written = ops.add_facts(memory.info, key, [*facts(100, 3), *facts(2, 1)])
            return (yield from memory._context.growing(key, written))

        memory._runner.run(write)
        remembered = memory._context.scope_stats.get(key)
        assert remembered is None or remembered == read_sample(pg_dsn, schema, scope)


def test_a_recall_while_a_crossing_write_builds_its_indexes_is_not_grown_again(
    pg_dsn: str, embedder: LocalEmbedder, schema: str, scope: ScopeArgs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that crosses the threshold commits, then builds the scope's indexes: a recall in
    that window reads the write's facts, which its report must not add again."""
    with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD) as memory:
        memory.add_facts(facts(0, THRESHOLD - 5), **scope)
        original = sync_runner._outside_transaction
        recalled: list[bool] = []

        def committed_then_recall(conn: Any, request: Any) -> Any:
            reply = original(conn, request)
            if not recalled:
                recalled.append(True)
                memory.recall("the garden", **scope)
            return reply

        monkeypatch.setattr(sync_runner, "_outside_transaction", committed_then_recall)
        memory.add_facts(facts(100, 6), **scope)
        assert recalled
        remembered = memory._context.scope_stats.get(Scope(**scope))
        assert remembered is None or remembered == read_sample(pg_dsn, schema, scope)


def fail_first_commit(dsn: str, schema: str) -> None:
    """A deferred trigger raising a serialization failure at the first COMMIT that inserted a fact
    (counted in a sequence, which a rollback keeps): the runner runs that write again."""
    s = sql.Identifier(schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SEQUENCE {s}.commit_failures").format(s=s))
        conn.execute(
            sql.SQL(
                """CREATE FUNCTION {s}.fail_first() RETURNS trigger LANGUAGE plpgsql AS $$
                   BEGIN
                     IF nextval({seq}) = 1 THEN
                       RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001';
                     END IF;
                     RETURN NULL;
                   END $$"""
            ).format(s=s, seq=sql.Literal(f"{schema}.commit_failures"))
        )
        conn.execute(
            sql.SQL(
                """CREATE CONSTRAINT TRIGGER fail_first AFTER INSERT ON {s}.facts
                   DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {s}.fail_first()"""
            ).format(s=s)
        )


def test_a_write_run_again_after_its_commit_failed_is_remembered_once(
    pg_dsn: str, embedder: LocalEmbedder, schema: str, scope: ScopeArgs
) -> None:
    """The first run's commit fails and the runner runs the write again: only the run that
    committed changes what is remembered (the rolled-back facts never enter the sample)."""
    with Memory.open(pg_dsn, embedder, schema=schema) as memory:
        memory.add_facts(facts(0, 5), **scope)
        memory.recall("the garden", **scope)
        key = Scope(**scope)
        fail_first_commit(pg_dsn, schema)
        memory.add_facts(facts(100, 3), **scope)
        remembered = memory._context.scope_stats.get(key)
        assert remembered is not None and remembered == read_sample(pg_dsn, schema, scope)
