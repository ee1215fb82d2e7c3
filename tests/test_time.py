"""Time (issue 17, item 3), against the real server: facts with no known start, transaction time
(`created_at`, `expired_at`, `known_at`) beside valid time (`as_of`), the migration of a store
written by schema version 5, and the two gaps closed with it (`forget` takes the reconciliation
locks; `times_seen` survives an export and import)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memsoda_core import IntervalError, LocalEmbedder, Memory, ScopeArgs
from memsoda_core.forgetting.deleting import Deleted, delete_facts
from memsoda_core.forgetting.operations import forget
from memsoda_core.runner.steps import Execute
from memsoda_core.store import schema as ddl
from memsoda_core.store import statements as sql_store
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope
from memsoda_core.writing import reconcile_statements as sql_reconcile
from tests.conftest import Either, open_memory
from tests.scripted import Script, drive

MOTHER = {"subject": "user", "predicate": "mother is", "object": "sunita", "object_type": "PERSON"}
BANK = {"subject": "user", "predicate": "bank is", "object": "abn amro", "object_type": "LITERAL"}
LONG_AGO = "1990-01-01"


def live_at(rows: Any) -> list[str]:
    return sorted(fact.object for fact in rows)


async def objects(memory: Either, scope: ScopeArgs, **when: Any) -> list[str]:
    """The objects of the scope's live facts, read by `list_facts` at `when`."""
    return live_at((await memory.list_facts(**scope, **when)).facts)


async def recalled(memory: Either, scope: ScopeArgs, query: str | None = None, **when: Any) -> list[str]:
    return live_at(scored.fact for scored in (await memory.recall(query, **scope, **when)).facts)


# --- valid time: no known start -----------------------------------------------------------------


async def test_a_fact_without_a_start_is_found_as_of_any_earlier_date(memory: Either, scope: ScopeArgs) -> None:
    (fact_id,) = await memory.add_facts([MOTHER], **scope)
    fact = await memory.get_fact(fact_id, **scope)
    assert fact.valid_at is None and fact.created_at is not None
    assert await recalled(memory, scope, "who is the user's mother", as_of=LONG_AGO) == ["sunita"]
    assert await recalled(memory, scope, as_of=LONG_AGO) == ["sunita"]  # the recency list too
    assert await objects(memory, scope, as_of=LONG_AGO) == ["sunita"]
    context = (await memory.recall("mother", **scope)).context
    assert "user mother is sunita  (valid: unknown – present)" in context


async def test_invalidate_of_a_fact_without_a_start_at_yesterday_works(memory: Either, scope: ScopeArgs) -> None:
    (fact_id,) = await memory.add_facts([MOTHER], **scope)
    yesterday = datetime.now(UTC) - timedelta(days=1)
    assert await memory.invalidate(fact_id, **scope, at=yesterday) is True
    fact = await memory.get_fact(fact_id, **scope)
    assert fact.invalid_at == yesterday and fact.expired_at is not None and fact.expired_at > yesterday
    assert await objects(memory, scope) == []
    assert await objects(memory, scope, as_of=yesterday - timedelta(days=400)) == ["sunita"]
    with pytest.raises(IntervalError):  # a real interval error still is one
        await memory.add_facts([{**MOTHER, "valid_at": "2025-01-02", "invalid_at": "2025-01-01"}], **scope)


async def test_a_new_single_value_without_a_start_leaves_one_live_fact_at_every_as_of(
    memory: Either, scope: ScopeArgs
) -> None:
    await memory.set_single_valued(["bank is"], **scope)
    (old,) = await memory.add_facts([BANK], **scope)  # no start: always, as far as memory knows
    (new,) = await memory.add_facts([{**BANK, "object": "ing"}], **scope)
    old_fact, new_fact = await memory.get_fact(old, **scope), await memory.get_fact(new, **scope)
    switch = new_fact.valid_at
    assert switch is not None and old_fact.invalid_at == switch and old_fact.superseded_by == new
    assert new_fact.created_at == switch == old_fact.expired_at  # learned then, ended then, started then
    for moment in (LONG_AGO, switch - timedelta(microseconds=1), switch, datetime.now(UTC), None):
        assert len(await objects(memory, scope, as_of=moment)) == 1, moment
    assert await recalled(memory, scope, "which bank", as_of=LONG_AGO) == ["abn amro"]
    assert await recalled(memory, scope, "which bank") == ["ing"]
    # said again without a start, the new value keeps its start: the old one ends there
    assert await memory.add_facts([{**BANK, "object": "ing"}], **scope) == [new]
    assert (await memory.get_fact(new, **scope)).valid_at == switch
    assert await objects(memory, scope, as_of=LONG_AGO) == ["abn amro"]


async def test_two_values_without_a_start_of_one_single_valued_relation_in_one_write_are_refused(
    memory: Either, scope: ScopeArgs
) -> None:
    await memory.set_single_valued(["bank is"], **scope)
    with pytest.raises(IntervalError, match="two values without valid_at"):
        await memory.add_facts([BANK, {**BANK, "object": "ing"}], **scope)
    assert (await memory.list_facts(**scope, status="all")).facts == ()


async def test_an_equal_write_without_a_start_makes_the_start_unknown(memory: Either, scope: ScopeArgs) -> None:
    (fact_id,) = await memory.add_facts([{**MOTHER, "valid_at": "2026-01-01"}], **scope)
    assert await memory.add_facts([MOTHER], **scope) == [fact_id]
    assert (await memory.get_fact(fact_id, **scope)).valid_at is None  # unknown is the earliest start


async def test_supersede_without_a_start_starts_when_memory_learns_it(memory: Either, scope: ScopeArgs) -> None:
    (old,) = await memory.add_facts([BANK], **scope)
    new = await memory.supersede(old, {**BANK, "object": "ing"}, **scope)
    old_fact, new_fact = await memory.get_fact(old, **scope), await memory.get_fact(new, **scope)
    assert new_fact.valid_at is not None and old_fact.invalid_at == new_fact.valid_at == new_fact.created_at
    assert old_fact.expired_at == new_fact.created_at
    for moment in (LONG_AGO, new_fact.valid_at, None):
        assert len(await objects(memory, scope, as_of=moment)) == 1


# --- transaction time ----------------------------------------------------------------------------


def _wait_for_an_advisory_lock(pg_dsn: str) -> bool:
    """Until some backend waits for an advisory lock (at most a minute)."""
    with psycopg.connect(pg_dsn, autocommit=True) as watcher:
        for _ in range(600):
            row = watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ).fetchone()
            if row and row[0]:
                return True
            watcher.execute("SELECT pg_sleep(0.1)")
    return False


def test_a_write_that_waited_for_a_relation_learns_after_the_one_it_waited_for(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    """The transaction time is read once the locks are held, not at the transaction's start: a
    writer that waited for another writer of the relation learns after that one committed."""
    from concurrent.futures import ThreadPoolExecutor

    with Memory.open(pg_dsn, embedder) as memory:
        memory.set_single_valued(["bank is"], **scope)
        (old,) = memory.add_facts([BANK], **scope)
        with psycopg.connect(pg_dsn) as writer, ThreadPoolExecutor(1) as pool:
            writer.execute(
                sql_reconcile.lock_relations("memsoda"),
                {
                    **scope,
                    "schema": "memsoda",
                    "subjects": ["user"],
                    "predicates": ["bank is"],
                    "objects": ["x"],
                    "singles": [False],
                },
            )
            pending = pool.submit(memory.add_facts, [{**BANK, "object": "ing"}], **scope)
            assert _wait_for_an_advisory_lock(pg_dsn) and not pending.done()
            row = writer.execute("SELECT clock_timestamp()").fetchone()
            assert row is not None
            writer.commit()
            (new,) = pending.result(timeout=60)
        fact = memory.get_fact(new, **scope)
        assert fact.valid_at == fact.created_at and fact.created_at > row[0]
        assert memory.get_fact(old, **scope).invalid_at == fact.valid_at


async def test_known_at_before_a_supersede_returns_the_old_value_and_after_it_the_new(
    memory: Either, scope: ScopeArgs
) -> None:
    (old,) = await memory.add_facts([{**BANK, "valid_at": "2024-01-01"}], **scope)
    before = (await memory.get_fact(old, **scope)).created_at
    # learned later that the change happened in the past: valid time and transaction time differ
    new = await memory.supersede(old, {**BANK, "object": "ing", "valid_at": "2024-06-01"}, **scope)
    learned = (await memory.get_fact(new, **scope)).created_at
    assert before < learned
    assert await recalled(memory, scope, "which bank", known_at=before) == ["abn amro"]
    assert await recalled(memory, scope, "which bank", known_at=learned) == ["ing"]
    assert await recalled(memory, scope, "which bank") == ["ing"]
    # what memory held true for mid-2025 before it learned of the change: still abn amro, open
    (then,) = (await memory.recall("which bank", **scope, known_at=before, as_of="2025-01-01")).facts
    assert then.fact.object == "abn amro" and then.fact.invalid_at is None and then.fact.superseded_by is None
    assert "abn amro  (valid: 2024-01-01 – present)" in (await memory.recall("bank", **scope, known_at=before)).context
    assert await objects(memory, scope, known_at=before, as_of="2025-01-01") == ["abn amro"]
    assert await objects(memory, scope, as_of="2025-01-01") == ["ing"]
    assert await objects(memory, scope, known_at=learned, as_of="2024-03-01") == ["abn amro"]
    ended = await memory.list_facts(**scope, status="ended", known_at=before, as_of="2025-01-01")
    assert ended.facts == ()  # memory did not know yet that it had ended
    assert [f.id for f in (await memory.list_facts(**scope, status="ended")).facts] == [old]


async def test_known_at_before_a_fact_was_written_excludes_it(memory: Either, scope: ScopeArgs) -> None:
    (first,) = await memory.add_facts([MOTHER], **scope)
    between = (await memory.get_fact(first, **scope)).created_at
    (second,) = await memory.add_facts([{**MOTHER, "predicate": "father is", "object": "raj"}], **scope)
    assert (await memory.get_fact(second, **scope)).created_at > between
    assert await recalled(memory, scope, "parents", known_at=between) == ["sunita"]
    assert await recalled(memory, scope, known_at=between) == ["sunita"]
    assert await recalled(memory, scope, "parents", known_at=between - timedelta(seconds=1)) == []
    assert await objects(memory, scope, known_at=between, status="all") == ["sunita"]
    assert await recalled(memory, scope, "parents") == ["raj", "sunita"]


def test_the_cli_recalls_and_lists_at_a_known_at(pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs) -> None:
    from typer.testing import CliRunner

    from memsoda_core.cli import app

    with Memory.open(pg_dsn, embedder) as memory:
        (old,) = memory.add_facts([BANK], **scope)
        before = memory.get_fact(old, **scope).created_at
        memory.supersede(old, {**BANK, "object": "ing"}, **scope)
    where = ["--dataset", scope["dataset"], "--project", scope["project"]]

    def cli(*args: str) -> Any:
        done = CliRunner().invoke(app, ["--dsn", pg_dsn, *args], env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert done.exit_code == 0, done.output
        return done.stdout

    assert "user bank is abn amro  (valid: unknown – present)" in cli(
        "recall", "bank", *where, "--known-at", str(before)
    )
    assert "user bank is ing" in cli("recall", "bank", *where)
    listed = json.loads(cli("facts", "list", *where, "--known-at", before.isoformat(), "--json"))
    assert [f["object"] for f in listed] == ["abn amro"]


# --- export and import -----------------------------------------------------------------------------


async def test_export_writes_an_unknown_start_as_null_and_times_seen_and_import_restores_both(
    memory: Either, scope: ScopeArgs
) -> None:
    await memory.add_facts([MOTHER, MOTHER, MOTHER, {**BANK, "valid_at": "2024-01-01"}], **scope)
    exported = io.StringIO()
    await memory.export_jsonl(exported, **scope)
    records = [json.loads(line) for line in exported.getvalue().splitlines()]
    assert [(r["valid_at"], r["times_seen"]) for r in records] == [(None, 3), ("2024-01-01T00:00:00+00:00", 1)]
    other = {**scope, "project": "copy"}
    await memory.import_jsonl(io.StringIO(exported.getvalue()), **other)
    facts = (await memory.list_facts(**other)).facts
    assert [(f.valid_at, f.times_seen) for f in facts] == [(None, 3), (datetime(2024, 1, 1, tzinfo=UTC), 1)]
    await memory.import_jsonl(io.StringIO(exported.getvalue()), **other)  # again: a no-op
    assert (await memory.list_facts(**other, status="all")).facts == facts


# --- forget takes the reconciliation locks ---------------------------------------------------------


INFO = StoreInfo(schema="memsoda", model="scripted", dimensions=4, text_search_config="english")
SCOPE = Scope(dataset="d", project="p")


def test_forget_takes_every_lock_of_the_scope_before_it_deletes() -> None:
    locked = [sql_reconcile.Locked(locks=512, learned_at=datetime(2026, 1, 1, tzinfo=UTC))]
    delete = delete_facts(INFO.schema, sql_store.entity_facts(INFO.schema))
    script = Script().on(sql_reconcile.lock_scope(INFO.schema), locked).on(delete, [Deleted(facts=1, items=0)])
    conversation = drive(forget(INFO, SCOPE, "abn amro"), script)
    lock = conversation.index(Execute, sql_reconcile.lock_scope(INFO.schema))
    assert 0 <= lock < conversation.index(Execute, delete)
    assert conversation.index(Execute, sql_reconcile.lock_relations(INFO.schema)) == -1  # no second lock call

    whole = Script().on(sql_reconcile.lock_scope(INFO.schema), locked).on(sql_store.count_facts(INFO.schema), [(3,)])
    conversation = drive(forget(INFO, SCOPE, None), whole)
    lock = conversation.index(Execute, sql_reconcile.lock_scope(INFO.schema))
    assert 0 <= lock < conversation.index(Execute, sql_store.forget_scope(INFO.schema)[0])


def test_a_forget_waits_for_a_writer_of_a_relation_it_deletes(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    """A writer holding a relation's lock (here a transaction that took it, as a write does before
    it reads) makes `forget` of a fact of that relation wait until it commits."""
    from concurrent.futures import ThreadPoolExecutor

    with Memory.open(pg_dsn, embedder) as memory:
        memory.add_facts([BANK], **scope)
        with psycopg.connect(pg_dsn) as writer, ThreadPoolExecutor(1) as pool:
            writer.execute(
                sql_reconcile.lock_relations("memsoda"),
                {
                    **scope,
                    "schema": "memsoda",
                    "subjects": ["user"],
                    "predicates": ["bank is"],
                    "objects": ["x"],
                    "singles": [True],
                },
            )
            pending = pool.submit(memory.forget, entity="user", **scope)
            assert _wait_for_an_advisory_lock(pg_dsn) and not pending.done()
            writer.commit()
            assert pending.result(timeout=60) == 1


# --- the migration of a version-5 store ------------------------------------------------------------


def _v5_store(pg_dsn: str, schema: str, embedder: LocalEmbedder) -> None:
    """A store as schema version 5 wrote it: migrations 1 to 5, its meta, and rows (a fact written
    without valid_at got the call's time as its start; a supersede ended one fact in another)."""
    shape = ddl.StoreShape(schema=schema, dimensions=embedder.dimensions, text_search_config="english")
    s = sql.Identifier(schema)
    vector = "[" + ",".join(["0.1"] * embedder.dimensions) + "]"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for statement in ddl.bootstrap_statements(schema):
            conn.execute(statement)
        for version in range(1, 6):
            for statement in ddl.MIGRATIONS[version](shape):
                conn.execute(statement)
        for key, value in (
            ("schema_version", "5"),
            ("model", embedder.model),
            ("dimensions", str(embedder.dimensions)),
            ("text_search_config", "english"),
        ):
            conn.execute(ddl.write_meta_statement(schema), (key, value))
        conn.execute(sql.SQL("INSERT INTO {s}.scopes (dataset, project, fact_count) VALUES ('d', 'p', 3)").format(s=s))
        conn.execute(
            sql.SQL(
                """INSERT INTO {s}.entities (dataset, project, name, type, fact_count, embedding)
                   VALUES ('d', 'p', 'user', 'PERSON', 3, %(v)s::vector)"""
            ).format(s=s),
            {"v": vector},
        )
        rows = [  # id, object, valid_at, invalid_at, superseded_by, created_at
            (1, "sunita", "2026-03-01 10:00:00.1+00", None, None, "2026-03-01 10:00:00.4+00"),  # defaulted start
            (2, "abn amro", "2024-01-01+00", "2025-01-01+00", 3, "2026-03-01 10:00:01+00"),
            (3, "ing", "2025-01-01+00", None, None, "2026-03-02 09:00:00+00"),  # superseded into: a supersede point
        ]
        for fid, obj, valid, invalid, by, created in rows:
            conn.execute(
                sql.SQL(
                    """INSERT INTO {s}.facts (dataset, project, id, subject, predicate, object, object_type,
                           subject_id, anchor_id, valid_at, invalid_at, confidence, created_at, embedding,
                           superseded_by)
                       SELECT 'd', 'p', %(id)s, 'user', %(p)s, %(o)s, 'LITERAL', e.id, e.id, %(va)s, %(ia)s, 1,
                              %(ca)s, %(v)s::vector, %(by)s
                       FROM {s}.entities e WHERE e.name = 'user'"""
                ).format(s=s),
                {
                    "id": fid,
                    "p": "mother is" if fid == 1 else "bank is",
                    "o": obj,
                    "va": valid,
                    "ia": invalid,
                    "ca": created,
                    "v": vector,
                    "by": by,
                },
            )


def test_a_store_written_by_schema_version_5_migrates_keeping_its_starts(pg_dsn: str, embedder: LocalEmbedder) -> None:
    schema = "time_v5"
    try:
        _v5_store(pg_dsn, schema, embedder)
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            assert memory.info.legacy_starts_through == 3  # recorded: these starts cannot be told apart
            facts = {f.id: f for f in memory.list_facts(dataset="d", project="p", status="all").facts}
            assert facts[1].valid_at == datetime(2026, 3, 1, 10, 0, 0, 100000, tzinfo=UTC)  # kept as it was
            assert facts[3].valid_at == datetime(2025, 1, 1, tzinfo=UTC)  # a supersede point, untouched
            assert facts[2].expired_at == facts[3].created_at  # the supersede's time
            assert facts[1].expired_at is None and facts[3].expired_at is None
            before = facts[3].created_at - timedelta(seconds=1)
            assert live_at(memory.list_facts(dataset="d", project="p", known_at=before, as_of="2025-06-01").facts) == [
                "abn amro"
            ]
            (new,) = memory.add_facts(
                [{**MOTHER, "object": "sunita", "object_type": "LITERAL"}], dataset="d", project="p"
            )
            assert new == 1  # the v5 fact, resolved to as any equal write
            assert memory.get_fact(1, dataset="d", project="p").valid_at is None  # now its start is unknown
        with psycopg.connect(pg_dsn) as conn:
            meta: dict[str, str] = dict(
                conn.execute(sql.SQL("SELECT key, value FROM {}.meta").format(sql.Identifier(schema)))
            )
        assert meta["schema_version"] == str(ddl.SCHEMA_VERSION) and meta[ddl.LEGACY_STARTS_KEY] == "3"
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:  # opened again: recorded once
            assert memory.info.legacy_starts_through == 3
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_a_new_store_records_no_legacy_starts(pg_dsn: str, embedder: LocalEmbedder) -> None:
    schema = "time_fresh"
    try:
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            assert memory.info.legacy_starts_through is None
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_times_and_rendered_days_do_not_follow_the_session_time_zone(
    flavour: str, pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client whose default time zone is west of UTC (libpq's PGTZ) reads a fact that starts at
    midnight UTC as starting that day, not the day before, and gets its times in UTC."""
    monkeypatch.setenv("PGTZ", "America/New_York")
    memory = await open_memory(flavour, pg_dsn, embedder)
    try:
        fact = {"subject": "user", "predicate": "moved to", "object": "lisbon", "valid_at": "2019-05-10T00:00:00Z"}
        await memory.add_facts([fact], **scope)
        result = await memory.recall("where did the user move?", **scope)
        assert "2019-05-10" in result.context, result.context
        assert "2019-05-09" not in result.context
        valid_at = result.facts[0].fact.valid_at
        assert valid_at is not None and valid_at.utcoffset() == timedelta(0)
    finally:
        await memory.close()
