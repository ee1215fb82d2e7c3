"""`forget` against the real server: forgetting a successor leaves no `superseded_by` naming a
deleted fact (the fact it ended stays ended, as history), also when the supersede races the
forget; and `forget(entity=...)` racing a writer into the same scope never deadlocks. The races
are forced: a test-side transaction holds a row the writer needs, `pg_blocking_pids` says who
waits for whom, and the row is let go only once both are where the old lock order deadlocked."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memsoda_core import LocalEmbedder, Memory, NotFoundError, NotLiveError, ScopeArgs
from tests.conftest import Either

LIVES = {"subject": "user", "predicate": "lives in", "object": "amsterdam", "object_type": "PLACE"}
MOVED = {**LIVES, "object": "utrecht"}


def dangling_pointers(dsn: str, scope: ScopeArgs) -> int:
    """Facts of the scope whose `superseded_by` names no fact."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            """SELECT count(*) FROM memsoda.facts p
               WHERE p.dataset = %(dataset)s AND p.project = %(project)s AND p.superseded_by IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM memsoda.facts f WHERE f.dataset = p.dataset
                                 AND f.project = p.project AND f.id = p.superseded_by)""",
            scope,
        ).fetchone()
    assert row is not None
    return int(row[0])


def miscounted_entities(dsn: str, scope: ScopeArgs) -> list[tuple[str, int, int]]:
    """Entities whose fact_count differs from their links (name, count, links)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            """SELECT e.name, e.fact_count, count(fe.fact_id)::int FROM memsoda.entities e
               LEFT JOIN memsoda.fact_entities fe
                 ON fe.dataset = e.dataset AND fe.project = e.project AND fe.entity_id = e.id
               WHERE e.dataset = %(dataset)s AND e.project = %(project)s
               GROUP BY e.name, e.fact_count HAVING e.fact_count <> count(fe.fact_id)""",
            scope,
        ).fetchall()


async def test_forgetting_a_successor_keeps_the_ended_fact_as_history(memory: Either, scope: ScopeArgs) -> None:
    old = (await memory.add_facts([{**LIVES, "valid_at": "2020-01-01"}], **scope))[0]
    new = await memory.supersede(old, {**MOVED, "valid_at": "2023-05-01"}, **scope)
    ended = await memory.get_fact(old, **scope)
    assert ended.superseded_by == new
    assert await memory.forget(entity="utrecht", **scope) == 1
    after = await memory.get_fact(old, **scope)
    assert after.superseded_by is None  # no pointer to the deleted fact
    assert after.invalid_at == ended.invalid_at and after.expired_at == ended.expired_at  # still ended, then
    assert [f.id for f in await memory.history(old, **scope)] == [old]
    with pytest.raises(NotLiveError) as caught:  # forgetting the new place does not revive the old one
        await memory.invalidate(old, **scope)
    assert caught.value.live_id is None
    assert dangling_pointers(memory.raw.dsn, scope) == 0


async def test_forgetting_an_entity_deletes_the_items_over_its_facts(memory: Either, scope: ScopeArgs) -> None:
    """An item is a document over its fact ("user noted ..."): `forget(entity=...)` deletes it with
    the fact, as `forget_source` does, so no item names a deleted fact."""
    (fact_id,) = await memory.put_items(
        [{"namespace": ["notes"], "key": "k", "value": {"t": 1}, "text": "oolong tea"}], **scope
    )
    assert fact_id is not None
    await memory.add_facts([{"subject": "ana", "predicate": "lives in", "object": "porto"}], **scope)
    assert await memory.forget(entity="user", **scope) == 1
    assert await memory.get_item(["notes"], "k", **scope) is None
    assert [fact.text for fact in (await memory.list_facts(**scope)).facts] == ["ana lives in porto"]


async def test_forgetting_the_middle_of_a_chain_clears_only_the_pointer_into_it(
    memory: Either, scope: ScopeArgs
) -> None:
    first = (await memory.add_facts([{**LIVES, "valid_at": "2019-01-01"}], **scope))[0]
    middle = await memory.supersede(first, {**MOVED, "valid_at": "2021-01-01"}, **scope)
    last = await memory.supersede(middle, {**LIVES, "object": "leiden", "valid_at": "2023-01-01"}, **scope)
    assert await memory.forget(entity="utrecht", **scope) == 1
    assert (await memory.get_fact(first, **scope)).superseded_by is None
    kept = await memory.get_fact(last, **scope)
    assert kept.invalid_at is None and kept.object == "leiden"  # the live end of the chain is untouched
    assert dangling_pointers(memory.raw.dsn, scope) == 0
    assert miscounted_entities(memory.raw.dsn, scope) == []


# --- forced races ----------------------------------------------------------------------------------


def deadlocks(dsn: str) -> int:
    """Deadlocks the server has detected in this database since it started."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT pg_stat_clear_snapshot(), deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[1])


def wait_until(dsn: str, holds: Callable[[psycopg.Connection[Any]], bool], what: str) -> None:
    """Poll the server (at most a minute) until `holds`; no fixed sleeps."""
    with psycopg.connect(dsn, autocommit=True) as watcher:
        for _ in range(1200):
            if holds(watcher):
                return
            watcher.execute("SELECT pg_sleep(0.05)")
    raise AssertionError(f"never happened: {what}")


def blocked_by(watcher: psycopg.Connection[Any], pid: int) -> list[int]:
    """The backends waiting for a lock that `pid` holds."""
    return [
        int(row[0])
        for row in watcher.execute(
            "SELECT a.pid FROM pg_stat_activity a WHERE %s = ANY(pg_blocking_pids(a.pid))", [pid]
        ).fetchall()
    ]


@pytest.fixture
def two_threads() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as pool:
        yield pool


def race(
    dsn: str,
    pool: ThreadPoolExecutor,
    hold: sql.SQL | sql.Composed,
    params: Mapping[str, Any],
    first: Callable[[], Any],
    second: Callable[[], Any],
) -> tuple[Any, Any]:
    """`first` runs until it waits for the row a test-side transaction holds (`hold`), `second`
    until it waits for `first`; then the row is let go and both finish."""
    with psycopg.connect(dsn) as holder:
        holder.execute(hold, params)
        holder_pid = holder.info.backend_pid
        one: Future[Any] = pool.submit(first)
        found: list[int] = []

        def first_waits(watcher: psycopg.Connection[Any]) -> bool:
            assert not one.done(), one.exception()
            found[:] = blocked_by(watcher, holder_pid)
            return bool(found)

        wait_until(dsn, first_waits, "the first call waits for the held row")
        two: Future[Any] = pool.submit(second)

        def second_waits(watcher: psycopg.Connection[Any]) -> bool:
            assert not two.done(), two.exception()
            return bool(blocked_by(watcher, found[0]))

        wait_until(dsn, second_waits, "the second call waits for the first")
        holder.rollback()
    return one.result(timeout=120), two.result(timeout=120)


def test_forget_racing_a_writer_that_touches_its_entity_never_deadlocks(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, two_threads: ThreadPoolExecutor
) -> None:
    """The old interleaving: the writer has bumped the entity counts (holding the entity's row) and
    waits for a lexeme row; forget (old order) updated the scope row and then waited to delete the
    entity; the writer's next step, the scope row, closed the cycle. Now forget takes every lock of
    the scope first, so it waits for the writer and then forgets the writer's fact too."""
    with Memory.open(pg_dsn, embedder) as memory:
        memory.add_facts([MOVED, {"subject": "ben", "predicate": "likes", "object": "zebra"}], **scope)
        before = deadlocks(pg_dsn)
        hold = sql.SQL(
            "SELECT 1 FROM memsoda.lexemes WHERE dataset = %(dataset)s AND project = %(project)s"
            " AND lexeme = 'zebra' FOR UPDATE"
        )
        written, forgotten = race(
            pg_dsn,
            two_threads,
            hold,
            scope,
            lambda: memory.add_facts(
                [{"subject": "ana", "predicate": "likes", "object": "zebra", "mentions": ["utrecht"]}], **scope
            ),
            lambda: memory.forget(entity="utrecht", **scope),
        )
        assert len(written) == 1
        assert forgotten == 2  # "user lives in utrecht" and the writer's fact mentioning utrecht
        assert deadlocks(pg_dsn) == before
        texts = sorted(f.text for f in memory.list_facts(**scope, status="all").facts)
        assert texts == ["ben likes zebra"]
        assert miscounted_entities(pg_dsn, scope) == []
        (row,) = memory.stats(**scope)
        assert row["facts"] == 1


def test_a_supersede_racing_the_forget_of_its_new_fact_leaves_no_dangling_pointer(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, two_threads: ThreadPoolExecutor
) -> None:
    """The supersede has stored "lives in utrecht" and waits (for the scope row, held here) before
    it commits the old fact's end; forget("utrecht") starts meanwhile. It waits for the supersede
    and then deletes the new fact and clears the pointer to it, in one transaction."""
    with Memory.open(pg_dsn, embedder) as memory:
        (old,) = memory.add_facts([{**LIVES, "valid_at": "2020-01-01"}], **scope)
        memory.add_facts([{"subject": "ana", "predicate": "visited", "object": "utrecht"}], **scope)
        before = deadlocks(pg_dsn)
        hold = sql.SQL("SELECT 1 FROM memsoda.scopes WHERE dataset = %(dataset)s AND project = %(project)s FOR UPDATE")
        new, forgotten = race(
            pg_dsn,
            two_threads,
            hold,
            scope,
            lambda: memory.supersede(old, {**MOVED, "valid_at": "2024-01-01"}, **scope),
            lambda: memory.forget(entity="utrecht", **scope),
        )
        assert forgotten == 2  # the new fact, committed before the forget read, and ana's visit
        with pytest.raises(NotFoundError):
            memory.get_fact(new, **scope)
        ended = memory.get_fact(old, **scope)
        assert ended.superseded_by is None and ended.invalid_at is not None
        assert dangling_pointers(pg_dsn, scope) == 0
        assert deadlocks(pg_dsn) == before
        assert miscounted_entities(pg_dsn, scope) == []
