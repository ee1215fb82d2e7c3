"""Writes that reconcile (issue 17), against the real server: no duplicate live facts, one live
value per single-valued relation (also under concurrent writers), safe supersede and invalidate,
facts read as data, and the migration of a version-4 store."""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memsoda_core import IntervalError, LocalEmbedder, Memory, NotFoundError, NotLiveError, ScopeArgs
from memsoda_core.store.schema import SCHEMA_VERSION
from memsoda_core.validation import validate_facts
from memsoda_core.writing import inserts
from memsoda_core.writing import reconcile_statements as sql_reconcile
from tests.conftest import Either, open_memory

LIVES = {"subject": "user", "predicate": "lives in", "object": "amsterdam", "object_type": "PLACE"}
BANK = {"subject": "user", "predicate": "bank is", "object": "abn amro", "object_type": "LITERAL"}


def live_count(pg_dsn: str, scope: ScopeArgs, predicate: str, schema: str = "memsoda") -> int:
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {schema}.facts WHERE dataset = %s AND project = %s"  # noqa: S608
            " AND lower(predicate) = %s AND invalid_at IS NULL",
            (scope["dataset"], scope["project"], predicate),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_fact_equal_to_a_live_one_resolves_to_it(memory: Either, scope: ScopeArgs) -> None:
    first = {**LIVES, "confidence": 0.6, "valid_at": "2025-01-01", "source_quote": "I live in Amsterdam"}
    (fact_id,) = await memory.add_facts([first], **scope)
    again = {**LIVES, "object": "Amsterdam", "confidence": 0.9, "valid_at": "2024-06-01", "source_quote": "later"}
    later = {**LIVES, "predicate": "Lives In", "confidence": 0.5, "valid_at": "2025-02-01"}
    ids = await memory.add_facts([again, later], **scope)
    assert ids == [fact_id, fact_id]
    fact = await memory.get_fact(fact_id, **scope)
    assert (fact.confidence, fact.valid_at.date().isoformat()) == (0.9, "2024-06-01")  # higher, earlier
    assert (fact.source_quote, fact.times_seen) == ("I live in Amsterdam", 3)  # first quote kept, counted
    assert (await memory.stats(**scope))[0]["facts"] == 1
    context = (await memory.recall("where does the user live", **scope)).context
    assert context.count("user lives in amsterdam") == 1


async def test_equal_facts_in_one_batch_are_stored_once(memory: Either, scope: ScopeArgs) -> None:
    ids = await memory.add_facts([LIVES, {**LIVES, "confidence": 0.5}, {**LIVES, "object": "utrecht"}], **scope)
    assert ids[0] == ids[1] != ids[2]
    assert (await memory.stats(**scope))[0]["facts"] == 2
    assert (await memory.get_fact(ids[0], **scope)).times_seen == 2


async def test_reimporting_an_export_adds_nothing(memory: Either, scope: ScopeArgs) -> None:
    facts = [{"subject": "user", "predicate": f"likes {i % 5}", "object": f"thing {i}"} for i in range(49)]
    ids = await memory.add_facts([*facts, {**BANK, "valid_at": "2024-01-01"}], **scope)
    await memory.supersede(ids[-1], {**BANK, "object": "ing", "valid_at": "2025-01-01"}, **scope)
    buffer = io.StringIO()
    await memory.export_jsonl(buffer, **scope)
    assert (await memory.stats(**scope))[0]["facts"] == 51  # 50 facts, one of them superseded
    report = await memory.import_jsonl(io.StringIO(buffer.getvalue()), **scope)
    assert report.facts == 51  # lines read
    stats = (await memory.stats(**scope))[0]
    assert (stats["facts"], stats["live_facts"]) == (51, 50)


async def test_a_new_value_of_a_single_valued_relation_supersedes_the_live_one(
    memory: Either, scope: ScopeArgs, pg_dsn: str
) -> None:
    assert await memory.set_single_valued(["Bank is"], **scope) == ["bank is"]
    (old,) = await memory.add_facts([{**BANK, "valid_at": "2024-01-01"}], **scope)
    (new,) = await memory.add_facts([{**BANK, "object": "ing", "valid_at": "2025-03-01"}], **scope)
    ended = await memory.get_fact(old, **scope)
    assert ended.invalid_at == datetime(2025, 3, 1, tzinfo=UTC) and ended.superseded_by == new
    assert live_count(pg_dsn, scope, "bank is") == 1
    assert [f.id for f in await memory.history(new, **scope)] == [old, new]
    # an older value arriving late is history: ended where the next value (ended or live) starts
    (late,) = await memory.add_facts([{**BANK, "object": "rabobank", "valid_at": "2023-01-01"}], **scope)
    history = await memory.get_fact(late, **scope)
    assert (history.invalid_at, history.superseded_by) == (datetime(2024, 1, 1, tzinfo=UTC), old)
    assert live_count(pg_dsn, scope, "bank is") == 1
    # multi-valued relations keep accumulating
    await memory.add_facts([{**LIVES, "predicate": "likes", "object": o} for o in ("tea", "jazz")], **scope)
    assert live_count(pg_dsn, scope, "likes") == 2


async def test_single_valued_per_fact_and_same_start_is_an_error(memory: Either, scope: ScopeArgs) -> None:
    (old,) = await memory.add_facts([{**BANK, "valid_at": "2024-01-01"}], **scope)
    (new,) = await memory.add_facts(
        [{**BANK, "object": "ing", "valid_at": "2025-01-01", "single_valued": True}], **scope
    )
    assert (await memory.get_fact(old, **scope)).superseded_by == new
    with pytest.raises(IntervalError):
        await memory.add_facts([{**BANK, "object": "bunq", "valid_at": "2025-01-01", "single_valued": True}], **scope)


def test_concurrent_writers_of_a_single_valued_relation_leave_one_live_fact(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    vector = embedder.embed_documents(["x"])[0]
    with Memory.open(pg_dsn, embedder, pool_size=8) as memory, ThreadPoolExecutor(max_workers=8) as pool:
        memory.set_single_valued(["bank is"], **scope)
        futures = [
            pool.submit(
                memory.add_facts,
                [{**BANK, "object": f"bank {i}"}, {**LIVES, "object": f"city {i % 3}"}],
                **scope,
                vectors=[vector, vector],
            )
            for i in range(32)
        ]
        for future in futures:
            future.result()  # no deadlock, no error
        page = memory.list_facts(**scope, predicate="bank is", status="all", limit=100)
    assert live_count(pg_dsn, scope, "bank is") == 1
    assert len(page.facts) == 32
    assert live_count(pg_dsn, scope, "lives in") == 3  # equal facts written at once: stored once


def test_declaring_a_relation_single_valued_waits_for_the_writers_in_the_scope(
    pg_dsn: str, sync_memory: Memory, scope: ScopeArgs
) -> None:
    sync_memory.add_facts([LIVES], **scope)
    keys = inserts.fact_arrays(validate_facts([LIVES]), sql_reconcile.KEY_FIELDS)
    params = {**scope, "schema": "memsoda", **keys, "singles": [False]}
    with psycopg.connect(pg_dsn) as writer, ThreadPoolExecutor(max_workers=1) as pool:
        writer.execute(sql_reconcile.lock_relations("memsoda"), params)  # a writer's locks, held until it commits
        declared = pool.submit(sync_memory.set_single_valued, ["lives in"], **scope)
        deadline = time.monotonic() + 30
        while not writer.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid <> pg_backend_pid()"
        ).fetchall():  # the registry does not change under a writer's locks: it waits for the commit
            assert not declared.done() and time.monotonic() < deadline, "set_single_valued did not wait"
            time.sleep(0.05)
        writer.commit()
        assert declared.result(timeout=60) == ["lives in"]


def _wait_for_a_lock_wait(conn: psycopg.Connection[Any]) -> None:
    deadline = time.monotonic() + 30
    while not conn.execute(
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid <> pg_backend_pid()"
    ).fetchall():
        assert time.monotonic() < deadline, "no writer waited for a lock"
        time.sleep(0.05)


def test_a_relation_declared_single_valued_while_a_writer_waits_is_locked_before_it_is_read(
    pg_dsn: str, sync_memory: Memory, scope: ScopeArgs
) -> None:
    """`set_single_valued` holds every lock of the scope while it registers the relation; a writer
    whose lock statement waited for it took only its value's lock (the statement's snapshot is
    older than the registration), then reads the relation as single-valued. Its relation is not
    locked: another writer of another value could run beside it (two live values). The write
    locks it before it reads the relation again (`late_relations`), and its value replaces the
    stored one."""
    sync_memory.add_facts([LIVES], **scope)
    lisbon = {**LIVES, "object": "lisbon"}
    base = {**scope, "schema": "memsoda"}
    keys = inserts.fact_arrays(validate_facts([lisbon]), sql_reconcile.KEY_FIELDS)

    def declaring(declarer: psycopg.Connection[Any]) -> None:  # what set_single_valued holds, uncommitted
        declarer.execute(sql_reconcile.lock_scope("memsoda"), base)
        declarer.execute(sql_reconcile.add_single_valued("memsoda"), {**scope, "predicates": ["lives in"]})

    # the statements alone: the lock statement locked no relation, the read sees a single-valued one
    with psycopg.connect(pg_dsn) as declarer, psycopg.connect(pg_dsn) as writer, ThreadPoolExecutor(1) as pool:
        declaring(declarer)
        locking = pool.submit(
            lambda: writer.execute(
                sql_reconcile.lock_relations("memsoda"), {**base, **keys, "singles": [False]}
            ).fetchall()
        )
        _wait_for_a_lock_wait(declarer)
        declarer.rollback()  # (rolled back: the write below declares it again)
        (locked,) = locking.result(timeout=30)
        writer.rollback()
    assert locked[2] == []  # relations_locked
    # memsoda's own write, racing it the same way while another writer holds the relation's lock:
    # once the declaration commits, the write waits for that lock before it reads the relation
    relation = f"{LIVES['subject']}\x1f{LIVES['predicate'].lower()}"
    bucket = "hashtext(concat_ws(chr(31), 'memsoda', %(dataset)s::text, %(project)s::text)), hashtext(%(key)s) & 511"
    value = f"{relation}\x1flisbon"
    with (
        psycopg.connect(pg_dsn) as other,
        psycopg.connect(pg_dsn) as declarer,
        ThreadPoolExecutor(1) as pool,
    ):
        other.execute(f"SELECT pg_advisory_xact_lock({bucket})", {**scope, "key": relation})
        declarer.execute(f"SELECT pg_advisory_xact_lock({bucket})", {**scope, "key": value})
        declarer.execute(sql_reconcile.add_single_valued("memsoda"), {**scope, "predicates": ["lives in"]})
        writing = pool.submit(sync_memory.add_facts, [lisbon], **scope)
        _wait_for_a_lock_wait(declarer)  # on the value's lock
        declarer.commit()
        _wait_for_a_lock_wait(other)  # now on the relation's, which `other` holds
        assert not writing.done()
        other.commit()
        writing.result(timeout=30)
    assert live_count(pg_dsn, scope, "lives in") == 1


@pytest.fixture
def overlap_schema(pg_dsn: str) -> Iterator[str]:
    """A schema of its own: `maintain` repairs every scope of its store, and counts what it did."""
    name = f"overlaps_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def insert_value(
    conn: psycopg.Connection[Any], schema: str, like: int, obj: str, valid: str, invalid: str | None
) -> int:
    """A value of fact `like`'s relation written around memsoda, as a store from before the
    single-valued history fix may hold it."""
    row = conn.execute(
        sql.SQL(
            """INSERT INTO {s}.facts (dataset, project, subject, predicate, object, object_type, subject_id,
                   object_id, anchor_id, valid_at, invalid_at, confidence, embedding)
               SELECT dataset, project, subject, predicate, %(o)s, object_type, subject_id, NULL, anchor_id,
                      %(va)s, %(ia)s, confidence, embedding
               FROM {s}.facts WHERE id = %(like)s RETURNING id"""
        ).format(s=sql.Identifier(schema)),
        {"o": obj, "va": valid, "ia": invalid, "like": like},
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_maintain_ends_overlapping_values_of_a_single_valued_relation(
    pg_dsn: str, embedder: LocalEmbedder, overlap_schema: str, scope: ScopeArgs, flavour: str
) -> None:
    memory = await open_memory(flavour, pg_dsn, embedder, schema=overlap_schema)
    try:
        await memory.set_single_valued(["Lives In"], **scope)
        (paris,) = await memory.add_facts([{**LIVES, "object": "paris", "valid_at": "2019-01-01"}], **scope)
        tea, coffee = await memory.add_facts(  # not single-valued: both stay
            [
                {"subject": "user", "predicate": "likes", "object": "tea", "valid_at": "2019-01-01"},
                {"subject": "user", "predicate": "likes", "object": "coffee", "valid_at": "2020-01-01"},
            ],
            **scope,
        )
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            rome = insert_value(conn, overlap_schema, paris, "rome", "2021-01-01+00", None)
            berlin = insert_value(conn, overlap_schema, paris, "berlin", "2020-01-01+00", "2022-01-01+00")
            paris_again = insert_value(conn, overlap_schema, paris, "Paris", "2019-06-01+00", None)  # the same value
        report = await memory.maintain()
        assert report.overlaps_repaired == 3
        facts = {f.id: f for f in (await memory.list_facts(**scope, status="all")).facts}
        ends = {fid: (facts[fid].invalid_at, facts[fid].superseded_by) for fid in (paris, paris_again, berlin, rome)}
        assert ends == {
            paris: (datetime(2019, 6, 1, tzinfo=UTC), paris_again),  # ends where the next fact starts
            paris_again: (datetime(2020, 1, 1, tzinfo=UTC), berlin),
            berlin: (datetime(2021, 1, 1, tzinfo=UTC), rome),  # an ended value's end moves earlier
            rome: (None, None),
        }
        assert facts[paris].expired_at is not None and facts[berlin].expired_at is None  # learned now; kept
        assert facts[tea].invalid_at is None and facts[coffee].invalid_at is None
        for at, holding in [("2019-03-01", {"paris"}), ("2020-06-01", {"berlin"}), ("2021-06-01", {"rome"})]:
            page = await memory.list_facts(**scope, predicate="lives in", as_of=at)
            assert {f.object.lower() for f in page.facts} == holding, at
        assert (await memory.maintain()).overlaps_repaired == 0
    finally:
        await memory.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_maintain_ends_an_equal_value_and_leaves_values_starting_together(
    pg_dsn: str, embedder: LocalEmbedder, overlap_schema: str, scope: ScopeArgs, flavour: str
) -> None:
    """Two live runs of one value (paris, Paris) showed the value twice: the earlier now ends where
    the later starts (they were one value, left as they were). Two values starting at the same
    instant cannot be ordered and neither can end at its start: left, and counted."""
    memory = await open_memory(flavour, pg_dsn, embedder, schema=overlap_schema)
    try:
        await memory.set_single_valued(["lives in", "works at"], **scope)
        works = {"subject": "user", "predicate": "works at", "object": "acme", "valid_at": "2020-01-01"}
        paris, acme = await memory.add_facts([{**LIVES, "object": "paris", "valid_at": "2019-01-01"}, works], **scope)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            paris_again = insert_value(conn, overlap_schema, paris, "Paris", "2019-06-01+00", None)
            globex = insert_value(conn, overlap_schema, acme, "globex", "2020-01-01+00", None)
        report = await memory.maintain(retention=False)
        assert (report.overlaps_repaired, report.overlaps_left) == (1, 2)
        facts = {f.id: f for f in (await memory.list_facts(**scope, status="all")).facts}
        assert (facts[paris].invalid_at, facts[paris].superseded_by) == (datetime(2019, 6, 1, tzinfo=UTC), paris_again)
        assert facts[paris_again].invalid_at is None
        assert facts[acme].invalid_at is None and facts[globex].invalid_at is None
        page = await memory.list_facts(**scope, predicate="lives in", as_of="2020-01-01")
        assert [f.id for f in page.facts] == [paris_again]
        again = await memory.maintain(retention=False)
        assert (again.overlaps_repaired, again.overlaps_left) == (0, 2)
    finally:
        await memory.close()


def test_maintain_commits_each_scope_it_repairs(
    pg_dsn: str, embedder: LocalEmbedder, overlap_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each scope's repair commits before the next: the locks of thousands of scopes held at once
    would not fit PostgreSQL's shared lock table ("out of shared memory", every run again)."""
    from memsoda_core.ops import overlaps

    scopes: list[ScopeArgs] = [{"dataset": f"d{n}", "project": "p"} for n in range(4)]
    held: list[int] = []
    with Memory.open(pg_dsn, embedder, schema=overlap_schema) as memory, psycopg.connect(pg_dsn) as watcher:
        for scope in scopes:  # two values live at once, then the relation declared single-valued
            cities = [{**LIVES, "object": "paris", "valid_at": "2019-01-01"}, {**LIVES, "object": "rome"}]
            memory.add_facts(cities, **scope)
            memory.set_single_valued(["lives in"], **scope)
        original = overlaps._repair_scope

        def watched(info: Any, scope: Any) -> Any:
            ((locks,),) = watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()"
            ).fetchall()
            watcher.rollback()
            held.append(locks)
            return (yield from original(info, scope))

        monkeypatch.setattr(overlaps, "_repair_scope", watched)
        assert memory.maintain(retention=False).overlaps_repaired == len(scopes)
    assert held == [0] * len(scopes)  # no scope's locks are still held when the next starts


def test_a_write_whose_relation_is_locked_late_is_learned_after_the_writers_it_waited_for(
    pg_dsn: str, sync_memory: Memory, scope: ScopeArgs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relation declared single-valued while writer W waited for its locks: W locks the relation
    late, after another writer of it (porto) committed; W's value is then learned after porto's,
    so it is the live one, not history before it."""
    from memsoda_core.writing import operation as write_operation

    sync_memory.add_facts([LIVES], **scope)
    lisbon, porto = {**LIVES, "object": "lisbon"}, {**LIVES, "object": "porto"}
    original, other_wrote = write_operation.lock_facts, threading.Event()

    def then_another_writer(*args: Any, **kwargs: Any) -> Any:  # W holds its value's lock only
        held = yield from original(*args, **kwargs)
        if threading.current_thread().name.startswith("W") and not other_wrote.is_set():
            other_wrote.set()
            with ThreadPoolExecutor(1) as other:
                other.submit(sync_memory.add_facts, [porto], **scope).result(timeout=30)
        return held

    monkeypatch.setattr(write_operation, "lock_facts", then_another_writer)
    with psycopg.connect(pg_dsn) as declarer, ThreadPoolExecutor(1, thread_name_prefix="W") as pool:
        declarer.execute(sql_reconcile.lock_scope("memsoda"), {**scope, "schema": "memsoda"})
        declarer.execute(sql_reconcile.add_single_valued("memsoda"), {**scope, "predicates": ["lives in"]})
        writing = pool.submit(sync_memory.add_facts, [lisbon], **scope)
        _wait_for_a_lock_wait(declarer)
        declarer.commit()
        writing.result(timeout=60)
    assert other_wrote.is_set()
    live = sync_memory.list_facts(**scope, predicate="lives in").facts
    assert [f.object for f in live] == ["lisbon"]


def test_an_import_locks_its_relations_once(
    sync_memory: Memory, scope: ScopeArgs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import locks every relation of its facts with its values, before its first row; its
    batches take no relation lock again."""
    from memsoda_core.writing import operation as write_operation

    sync_memory.set_single_valued(["lives in"], **scope)
    lines = "".join(
        json.dumps({"kind": "fact", "subject": f"user{i}", "predicate": "lives in", "object": "paris"}) + "\n"
        for i in range(40)
    )
    original, late = write_operation.lock_facts, []

    def counting(*args: Any, **kwargs: Any) -> Any:
        late.append(kwargs.get("relations", False))
        return (yield from original(*args, **kwargs))

    monkeypatch.setattr(write_operation, "lock_facts", counting)
    sync_memory.import_jsonl(io.StringIO(lines), **scope, batch_size=10)
    assert late == []  # (the import's own lock is `ops.transfer`'s)


async def test_only_a_live_fact_can_be_superseded_or_ended(memory: Either, scope: ScopeArgs) -> None:
    (first,) = await memory.add_facts([{**BANK, "valid_at": "2024-01-01"}], **scope)
    second = await memory.supersede(first, {**BANK, "object": "ing", "valid_at": "2025-01-01"}, **scope)
    with pytest.raises(NotLiveError) as raised:
        await memory.supersede(first, {**BANK, "object": "bunq", "valid_at": "2026-01-01"}, **scope)
    assert raised.value.live_id == second and f"fact {second} is live now" in str(raised.value)
    with pytest.raises(NotLiveError):
        await memory.invalidate(first, **scope)
    assert await memory.invalidate(second, **scope) is True
    with pytest.raises(NotLiveError) as ended:
        await memory.invalidate(second, **scope)
    assert ended.value.live_id is None
    with pytest.raises(NotLiveError):
        await memory.supersede(second, {**BANK, "object": "bunq"}, **scope)
    history = await memory.history(first, **scope)
    assert [(f.id, f.superseded_by) for f in history] == [(first, second), (second, None)]
    stats = (await memory.stats(**scope))[0]
    assert stats["facts"] == 2  # the rejected supersede wrote nothing


async def test_list_facts_pages_by_keyset_and_filters(memory: Either, scope: ScopeArgs) -> None:
    facts = [{"subject": f"person {i % 3}", "predicate": "knows", "object": f"friend {i}"} for i in range(7)]
    ids = await memory.add_facts(facts, **scope)
    await memory.invalidate(ids[0], **scope)
    page = await memory.list_facts(**scope, limit=4)
    assert [f.id for f in page.facts] == ids[1:5] and page.next_after == ids[4]
    rest = await memory.list_facts(**scope, limit=4, after=page.next_after)
    assert [f.id for f in rest.facts] == ids[5:] and rest.next_after is None
    assert [f.id for f in (await memory.list_facts(**scope, status="ended")).facts] == [ids[0]]
    assert len((await memory.list_facts(**scope, status="all")).facts) == 7
    assert [f.id for f in (await memory.list_facts(**scope, subject="Person 1")).facts] == [ids[1], ids[4]]
    assert [f.id for f in (await memory.list_facts(**scope, entity="friend 2")).facts] == [ids[2]]
    # no start given: true for as long as memory knows, so live in 2000, the one ended today too
    assert [f.id for f in (await memory.list_facts(**scope, as_of="2000-01-01")).facts] == ids
    with pytest.raises(NotFoundError):
        await memory.get_fact(ids[0], dataset=scope["dataset"], project="another")


def test_a_version_4_store_with_duplicates_migrates_without_losing_them(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    schema = "reconcile_v4"
    try:
        with Memory.open(pg_dsn, embedder, schema=schema, layout="plain") as memory:
            (kept,) = memory.add_facts([LIVES], **scope)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # what a version-4 store looks like
            conn.execute(f"DROP TABLE {schema}.single_valued, {schema}.items, {schema}.fact_sources")  # v5, v7, v8
            conn.execute(f"DROP TABLE {schema}.tenant_partitions")  # v9
            conn.execute(f"DROP INDEX {schema}.facts_ended")  # v10
            conn.execute(f"DROP TABLE {schema}.retention")  # v11 (items went above)
            conn.execute(f"DELETE FROM {schema}.meta WHERE key = 'layout'")  # noqa: S608
            conn.execute(f"DROP INDEX {schema}.facts_relation, {schema}.facts_superseded_by")
            conn.execute(f"ALTER TABLE {schema}.facts DROP COLUMN superseded_by, DROP COLUMN times_seen")
            conn.execute(f"ALTER TABLE {schema}.facts DROP COLUMN expired_at")  # and without version 6's
            conn.execute(f"ALTER TABLE {schema}.facts DROP COLUMN item_owned")  # and version 13's
            conn.execute(f"UPDATE {schema}.meta SET value = '4' WHERE key = 'schema_version'")  # noqa: S608
            conn.execute(  # the duplicate a version-4 write stored
                f"""INSERT INTO {schema}.facts (dataset, project, subject, predicate, object, object_type,
                        subject_id, object_id, anchor_id, valid_at, confidence, embedding)
                    SELECT dataset, project, subject, predicate, object, object_type, subject_id, object_id,
                           anchor_id, valid_at, confidence, embedding FROM {schema}.facts"""  # noqa: S608
            )
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            assert memory.stats(**scope)[0]["facts"] == 2  # nothing merged or lost
            assert memory.add_facts([LIVES], **scope) == [kept]  # new writes resolve to the oldest
            assert memory.get_fact(kept, **scope).times_seen == 2
        with psycopg.connect(pg_dsn) as conn:
            version = conn.execute(f"SELECT value FROM {schema}.meta WHERE key = 'schema_version'").fetchone()  # noqa: S608
        assert version == (str(SCHEMA_VERSION),)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_the_cli_lists_shows_supersedes_invalidates_and_tells_a_fact_history(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    from typer.testing import CliRunner

    from memsoda_core.cli import app

    with Memory.open(pg_dsn, embedder) as memory:
        (old,) = memory.add_facts([{**BANK, "valid_at": "2024-01-01"}], **scope)
    runner = CliRunner()
    where = ["--dataset", scope["dataset"], "--project", scope["project"]]

    def cli(*args: str) -> Any:
        return runner.invoke(app, ["--dsn", pg_dsn, *args], env={"COLUMNS": "200", "NO_COLOR": "1"})

    replaced = cli("supersede", str(old), *where, "--object", "ing", "--valid-at", "2025-01-01")
    assert replaced.exit_code == 0, replaced.output
    new = int(replaced.stdout.split()[1])
    listed = cli("facts", "list", *where, "--json")
    assert [f["object"] for f in json.loads(listed.stdout)] == ["ing"]
    chain = cli("facts", "history", str(new), *where, "--json")
    assert [f["id"] for f in json.loads(chain.stdout)] == [old, new]
    shown = cli("facts", "show", str(old), *where)
    assert "user bank is abn amro" in shown.stdout and str(new) in shown.stdout
    again = cli("supersede", str(old), *where, "--object", "bunq")
    assert again.exit_code == 1 and f"fact {new} is live now" in again.stderr
    assert cli("invalidate", str(new), *where).exit_code == 0
    assert json.loads(cli("facts", "list", *where, "--json").stdout) == []
    assert len(json.loads(cli("facts", "list", *where, "--status", "all", "--json").stdout)) == 2


def test_writers_and_repeated_declarations_of_their_relations_keep_one_live_value(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    """Stress, not timed: writers of values without a start of relations p0 and p1, while another
    thread declares each single-valued, then not, over and over (every declaration changes the
    registry). A writer whose locks waited for a declaration locks its relation late, out of the
    locks' order (`reconcile_statements.late_relations`: some 15 times a run); a wait cycle that
    closes is run again, whether its victim is a writer or the declaration (which raised
    `StoreBusyError` in about one run of four). No error may escape, and once the relations stay
    declared, a last write of each leaves one live value."""
    predicates = ["p0", "p1"]
    vector = embedder.embed_documents(["x"])[0]
    declaring = threading.Event()

    def fact(predicate: str, value: str) -> dict[str, Any]:
        return {"subject": "user", "predicate": predicate, "object": value, "object_type": "LITERAL"}

    def write(memory: Memory, writer: int, rounds: int) -> None:
        for n in range(rounds):
            predicate = predicates[(writer + n) % len(predicates)]
            memory.add_facts([fact(predicate, f"w{writer} v{n}")], **scope, vectors=[vector])

    def declare(memory: Memory, rounds: int) -> None:
        for n in range(rounds):
            predicate = predicates[n % len(predicates)]
            memory.set_single_valued([predicate], **scope, single_valued=n // 2 % 2 == 0)
            declaring.set()

    with Memory.open(pg_dsn, embedder, pool_size=8) as memory:
        memory.add_facts([fact("p0", "start")], **scope, vectors=[vector])  # the scope's row
        with ThreadPoolExecutor(max_workers=7) as pool:
            declarer = pool.submit(declare, memory, 80)
            declaring.wait(timeout=30)
            writers = [pool.submit(write, memory, writer, 30) for writer in range(6)]
            for future in [declarer, *writers]:
                future.result()  # an error in a thread is raised here
        memory.set_single_valued(predicates, **scope)
        for predicate in predicates:
            memory.add_facts([fact(predicate, "last")], **scope, vectors=[vector])
        for predicate in predicates:
            live = memory.list_facts(**scope, predicate=predicate).facts
            assert [f.object for f in live] == ["last"], predicate


def test_a_declaration_that_loses_a_wait_cycle_with_a_late_relation_lock_is_run_again(
    pg_dsn: str, sync_memory: Memory, scope: ScopeArgs
) -> None:
    """A writer that locks its relation late holds a value's lock and takes a lower one, out of
    the locks' order, while `set_single_valued` takes every lock of the scope in ascending order:
    a wait cycle, whose victim PostgreSQL ends. A declaration that was the victim raised
    `StoreBusyError` (its committed step before, which makes the scope's row, kept the runner from
    running it again); it is run again once the writer commits. The writer here is a connection
    holding the scope's last lock and then taking its first, as `late_relations` does."""
    sync_memory.add_facts([BANK], **scope)  # the scope's row
    key = "SELECT hashtext(concat_ws(chr(31), 'memsoda', %(dataset)s::text, %(project)s::text))"
    with psycopg.connect(pg_dsn) as writer, ThreadPoolExecutor(1) as pool:
        writer.execute("SET deadlock_timeout = '30s'")  # the declaration's check finds the cycle
        ((scope_key,),) = writer.execute(key, dict(scope)).fetchall()
        writer.execute("SELECT pg_advisory_xact_lock(%s, %s)", (scope_key, sql_reconcile.LOCK_BUCKETS - 1))
        declaring = pool.submit(sync_memory.set_single_valued, ["lives in"], **scope)
        with psycopg.connect(pg_dsn, autocommit=True) as watcher:
            while not watcher.execute(
                "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                " AND objid = %s AND classid = %s::oid",
                (sql_reconcile.LOCK_BUCKETS - 1, scope_key & 0xFFFFFFFF),
            ).fetchone()[0]:  # type: ignore[index]
                time.sleep(0.01)
        writer.execute("SELECT pg_advisory_xact_lock(%s, 0)", (scope_key,))  # waits until the victim rolls back
        writer.commit()
        assert declaring.result(timeout=60) == ["lives in"]
