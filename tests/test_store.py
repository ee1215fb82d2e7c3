"""The memory store: schema, write path, validation, atomicity, embedded server lifecycle."""

from __future__ import annotations

import inspect
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from memsoda_core import (
    AsyncMemory,
    ConfidenceError,
    ConfigurationError,
    DateError,
    EmbedderMismatchError,
    EmbeddingError,
    EmptyFieldError,
    FactInput,
    ImportFormatError,
    IntervalError,
    InvalidTextError,
    LimitError,
    LocalEmbedder,
    Memory,
    NotFoundError,
    NotLiveError,
    ScopeArgs,
    ScopeError,
    TextTooLongError,
    ValidationError,
)
from memsoda_core.limits import MAX_BATCH, MAX_NAME_CHARS
from memsoda_core.store.schema import ENTITY_FILLFACTOR, SCHEMA_VERSION
from tests.conftest import Either, open_memory
from tests.helpers import CountingEmbedder, FaultyEmbedder, OtherModel

NETFLIX: list[dict[str, Any]] = [
    {"subject": "breaking bad", "predicate": "streams on", "object": "netflix", "object_type": "PRODUCT"},
    {
        "subject": "user",
        "predicate": "favourite show is",
        "object": "breaking bad",
        "subject_type": "PERSON",
        "object_type": "SHOW",
        "valid_at": "2026-08-16",
        "confidence": 0.9,
        "source_quote": "my favourite show is Breaking Bad",
    },
    {
        "subject": "user",
        "predicate": "drives",
        "object": "honda civic",
        "object_type": "PRODUCT",
        "valid_at": "2026-03-01",
    },
]


def count_rows(dsn: str, table: str, dataset: str) -> int:
    with psycopg.connect(dsn) as conn:
        query = psycopg.sql.SQL("SELECT count(*) FROM memsoda.{} WHERE dataset = %s").format(
            psycopg.sql.Identifier(table)
        )
        row = conn.execute(query, (dataset,)).fetchone()
        assert row is not None
        return int(row[0])


# --- schema ------------------------------------------------------------------------------------


def test_a_fresh_store_is_analyzed_once_it_holds_a_few_hundred_facts(pg_dsn: str, embedder: LocalEmbedder) -> None:
    schema = "fresh_stats"
    facts = [{"subject": f"p{i % 7}", "predicate": "noted", "object": f"item {i}"} for i in range(400)]
    try:
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            memory.add_facts(facts[:10], dataset="d", project="p")
            with psycopg.connect(pg_dsn) as conn:
                # the DEFAULT partition, where small tenants grow (a partitioned table has no statistics of its own)
                before = conn.execute(
                    "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (f"{schema}.facts_shared",)
                )
                assert before.fetchone() == (-1,)  # never analyzed
            memory.add_facts(facts[10:], dataset="d", project="p")
            with psycopg.connect(pg_dsn) as conn:
                after = conn.execute(
                    "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (f"{schema}.facts_shared",)
                )
                assert after.fetchone() == (400,)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_schema_creation_is_idempotent(pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs) -> None:
    with Memory.open(pg_dsn, embedder) as first:
        first.add_facts(NETFLIX[:1], **scope)
    with Memory.open(pg_dsn, embedder) as second:
        assert second.recall("netflix", **scope).facts
    with psycopg.connect(pg_dsn) as conn:
        meta: dict[str, str] = dict(conn.execute("SELECT key, value FROM memsoda.meta").fetchall())
    assert meta["schema_version"] == str(SCHEMA_VERSION)
    assert meta["model"] == embedder.model
    assert meta["dimensions"] == "384"


def test_a_store_of_an_older_version_is_upgraded_at_open(pg_dsn: str, embedder: LocalEmbedder) -> None:
    def fillfactor(conn: psycopg.Connection[Any], table: str = "entities") -> Any:
        return conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (f"upgrade_test.{table}",)
        ).fetchone()

    try:
        with Memory.open(pg_dsn, embedder, schema="upgrade_test", layout="plain") as memory:
            memory.add_facts(NETFLIX, dataset="d", project="p")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert fillfactor(conn) == ([f"fillfactor={ENTITY_FILLFACTOR}"],)
            # what a version-2 store looked like
            conn.execute("ALTER TABLE upgrade_test.entities RESET (fillfactor)")
            conn.execute("DROP TABLE upgrade_test.lexemes")
            conn.execute("DROP TABLE upgrade_test.single_valued")  # and without version 5's parts
            conn.execute("DROP INDEX upgrade_test.facts_relation, upgrade_test.facts_superseded_by")
            conn.execute("ALTER TABLE upgrade_test.facts DROP COLUMN superseded_by, DROP COLUMN times_seen")
            conn.execute("ALTER TABLE upgrade_test.facts DROP COLUMN expired_at")  # and version 6's
            conn.execute("ALTER TABLE upgrade_test.facts DROP COLUMN item_owned")  # and version 13's
            conn.execute("DROP TABLE upgrade_test.items")  # and without version 7's
            conn.execute("DROP TABLE upgrade_test.fact_sources")  # and version 8's
            conn.execute("DROP TABLE upgrade_test.tenant_partitions")  # and version 9's
            conn.execute("DROP INDEX upgrade_test.facts_ended")  # and version 10's
            conn.execute("DROP TABLE upgrade_test.retention")  # and version 11's (items went above)
            conn.execute("DELETE FROM upgrade_test.meta WHERE key = 'layout'")
            conn.execute("UPDATE upgrade_test.meta SET value = '2' WHERE key = 'schema_version'")
        with Memory.open(pg_dsn, embedder, schema="upgrade_test") as upgraded:
            assert upgraded.info.layout == "partitioned"  # and partitioned: its tables are the DEFAULT partitions now
            assert upgraded.recall("netflix", dataset="d", project="p").facts
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert fillfactor(conn, "entities_shared") == ([f"fillfactor={ENTITY_FILLFACTOR}"],)
            counted = lexeme_counts(conn, "upgrade_test", "d", "p")  # counted from the stored facts
            assert counted["kept"] == counted["actual"] and counted["kept"]["bad"] == 2
            version = conn.execute("SELECT value FROM upgrade_test.meta WHERE key = 'schema_version'").fetchone()
            assert version == (str(SCHEMA_VERSION),)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS upgrade_test CASCADE")


def test_the_upgrade_to_v13_takes_the_facts_items_refer_to_as_theirs(pg_dsn: str, embedder: LocalEmbedder) -> None:
    """Before v13 a fact created for an item was not told apart from one the application wrote: the
    facts items refer to at the upgrade are items' own, and end with the last item that refers to them."""
    schema = f"memsoda_v12_{uuid.uuid4().hex[:8]}"
    scope: ScopeArgs = {"dataset": "d", "project": "p"}
    noted = {"subject": "user", "predicate": "noted", "object": "buy milk", "object_type": "LITERAL"}
    try:
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            (fact_id,) = memory.put_items([{"namespace": ["n"], "key": "k", "value": {}, "text": "buy milk"}], **scope)
            (own,) = memory.add_facts([{**noted, "object": "buy bread"}], **scope)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # what a version-12 store looks like
            conn.execute(sql.SQL("ALTER TABLE {}.facts DROP COLUMN item_owned").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL("UPDATE {}.meta SET value = '12' WHERE key = 'schema_version'").format(sql.Identifier(schema))
            )
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            memory.put_items([{"namespace": ["n"], "key": "k", "value": None}], **scope)
            assert fact_id is not None and memory.get_fact(fact_id, **scope).invalid_at is not None
            assert memory.put_items([{"namespace": ["n"], "key": "b", "value": {}, "text": "buy bread"}], **scope) == [
                own
            ]
            memory.put_items([{"namespace": ["n"], "key": "b", "value": None}], **scope)
            assert memory.get_fact(own, **scope).invalid_at is None
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_the_upgrade_to_v13_leaves_a_fact_the_application_shows_it_wrote_its_own(
    pg_dsn: str, embedder: LocalEmbedder
) -> None:
    """An application fact an item came to share (the item's put resolved to it) was marked items'
    own by the upgrade, and ended with the item. It stays the application's where it shows a write
    items never make: no known start, a start well before memory learned it, a quote, a source."""
    schema = f"memsoda_v12_{uuid.uuid4().hex[:8]}"
    scope: ScopeArgs = {"dataset": "d", "project": "p"}
    noted = {"subject": "user", "predicate": "noted", "object_type": "LITERAL"}
    now = datetime.now(UTC)
    written: dict[str, dict[str, Any]] = {
        "unknown start": {},
        "early start": {"valid_at": now - timedelta(days=2)},
        "quoted": {"valid_at": now, "source_quote": "I said so"},
        "sourced": {"valid_at": now},
        "indistinguishable": {"valid_at": now},
    }
    try:
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            ids = dict(
                zip(
                    written,
                    memory.add_facts([{**noted, "object": t, **f} for t, f in written.items()], **scope),
                    strict=True,
                )
            )
            items = [{"namespace": ["n"], "key": t, "value": {}, "text": t} for t in written]
            assert memory.put_items(items, **scope) == list(ids.values())  # the items share those facts
            (item_only,) = memory.put_items(
                [{"namespace": ["n"], "key": "k", "value": {}, "text": "buy milk"}], **scope
            )
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # what a version-12 store looks like
            s = sql.Identifier(schema)
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.fact_sources (dataset, project, fact_id, thread_id) VALUES ('d', 'p', %s, 't')"
                ).format(s),
                (ids["sourced"],),
            )  # as `remember` records where it learned a fact
            conn.execute(sql.SQL("ALTER TABLE {}.facts DROP COLUMN item_owned").format(s))
            conn.execute(sql.SQL("UPDATE {}.meta SET value = '12' WHERE key = 'schema_version'").format(s))
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            memory.put_items([{**item, "value": None} for item in items], **scope)
            memory.put_items([{"namespace": ["n"], "key": "k", "value": None}], **scope)
            live = {t: memory.get_fact(fact_id, **scope).invalid_at is None for t, fact_id in ids.items()}
            assert live == {**dict.fromkeys(written, True), "indistinguishable": False}  # the one it cannot tell
            assert item_only is not None and memory.get_fact(item_only, **scope).invalid_at is not None
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_other_schema_name_is_a_separate_store(pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs) -> None:
    with Memory.open(pg_dsn, embedder, schema="memsoda_other") as other:
        other.add_facts(NETFLIX[:1], **scope)
        assert other.info.schema == "memsoda_other"
    assert count_rows(pg_dsn, "facts", scope["dataset"]) == 0


@pytest.mark.parametrize(
    ("model", "dimensions"),
    [("another-model", None), (None, 768)],
    ids=["other-model", "other-dimension"],
)
def test_embedder_of_another_model_or_dimension_is_refused(
    pg_dsn: str, embedder: LocalEmbedder, model: str | None, dimensions: int | None
) -> None:
    Memory.open(pg_dsn, embedder).close()  # the store exists with the MiniLM space
    with pytest.raises(EmbedderMismatchError, match="384-dimensional vectors"):
        Memory.open(pg_dsn, OtherModel(embedder, model=model, dimensions=dimensions))


def test_the_text_search_configuration_is_chosen_once(pg_dsn: str, embedder: LocalEmbedder) -> None:
    schema = f"ts_{os.getpid()}_{random.randrange(10**6)}"
    with pytest.raises(ConfigurationError, match="'klingon' is not a text search configuration"):
        Memory.open(pg_dsn, embedder, schema=schema, text_search_config="klingon")
    with psycopg.connect(pg_dsn) as conn:  # nothing of the store was made
        assert conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone() == (None,)
    with Memory.open(pg_dsn, embedder, schema=schema, text_search_config="simple") as memory:
        assert memory.info.text_search_config == "simple"
    with pytest.raises(ConfigurationError, match="searches text with the 'simple' configuration"):
        Memory.open(pg_dsn, embedder, schema=schema, text_search_config="english")
    with Memory.open(pg_dsn, embedder, schema=schema) as memory:  # None: the store's own
        assert memory.info.text_search_config == "simple"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


async def test_async_open_refuses_mismatched_embedder_too(pg_dsn: str, embedder: LocalEmbedder) -> None:
    with pytest.raises(EmbedderMismatchError):
        await AsyncMemory.open(pg_dsn, OtherModel(embedder, model="x"))


def test_sync_and_async_expose_the_same_methods() -> None:
    """Same public methods (`open` included), same parameters: names, kinds, defaults and
    annotations; `Memory` is generated from `AsyncMemory`, and this holds the generator to it."""

    def public(cls: type) -> dict[str, list[inspect.Parameter]]:
        return {
            name: list(inspect.signature(member).parameters.values())
            for name, member in inspect.getmembers(cls, callable)
            if not name.startswith("_")
        }

    sync, asynchronous = public(Memory), public(AsyncMemory)
    assert "open" in sync and "recall" in sync
    assert sync == asynchronous
    for name in asynchronous:
        if name != "open":  # a classmethod that awaits the pool; checked below
            assert inspect.iscoroutinefunction(getattr(AsyncMemory, name)), name
    assert inspect.iscoroutinefunction(AsyncMemory.open)


def test_core_imports_without_langchain_or_llamaindex() -> None:
    code = textwrap.dedent(
        """
        import sys
        for blocked in ("langchain_core", "langchain", "llama_index", "llama_index.core"):
            sys.modules[blocked] = None  # any import of them now fails
        import memsoda_core
        from memsoda_core import Memory, AsyncMemory
        loaded = [m for m in sys.modules if m.startswith(("langchain", "llama_index")) and sys.modules[m]]
        assert not loaded, loaded
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# --- the write path ----------------------------------------------------------------------------


async def test_add_facts_returns_ids_in_order_and_links_entities(memory: Either, pg_dsn: str, scope: ScopeArgs) -> None:
    ids = await memory.add_facts(NETFLIX, **scope)
    assert len(ids) == 3 and ids == sorted(ids)
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT f.id, f.subject, a.name FROM memsoda.facts f JOIN memsoda.entities a"
            " ON a.dataset = f.dataset AND a.project = f.project AND a.id = f.anchor_id"
            " WHERE f.dataset = %s ORDER BY f.id",
            (scope["dataset"],),
        ).fetchall()
        entities: dict[str, str] = dict(
            conn.execute("SELECT name, type FROM memsoda.entities WHERE dataset = %s", (scope["dataset"],)).fetchall()
        )
    assert [(r[0], r[1]) for r in rows] == list(zip(ids, ["breaking bad", "user", "user"], strict=True))
    # the anchor defaults to the object when it is an entity
    assert [r[2] for r in rows] == ["netflix", "breaking bad", "honda civic"]
    assert entities == {
        "breaking bad": "SHOW",
        "netflix": "PRODUCT",
        "user": "PERSON",
        "honda civic": "PRODUCT",
    }


async def test_literal_object_anchors_on_subject_and_names_are_normalized(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(
        [FactInput(subject="  The   USER ", predicate="is aged", object="42", object_type="literal")], **scope
    )
    result = await memory.recall("how old", **scope)
    (scored,) = result.facts
    assert scored.fact.subject == "the user"
    assert scored.fact.anchor == "the user"
    assert scored.fact.object == "42" and scored.fact.object_type == "LITERAL"


async def test_fact_embedding_is_anchor_enriched(
    memory: Either, pg_dsn: str, scope: ScopeArgs, embedder: LocalEmbedder
) -> None:
    await memory.add_facts([NETFLIX[1]], **scope)
    expected = embedder.embed_documents(["user favourite show is breaking bad. About: breaking bad."])[0]
    bare = embedder.embed_documents(["user favourite show is breaking bad"])[0]
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT embedding::text FROM memsoda.facts WHERE dataset = %s", (scope["dataset"],)
        ).fetchone()
    assert row is not None
    stored = json.loads(row[0])
    assert stored == pytest.approx(expected, abs=1e-5)
    assert stored != pytest.approx(bare, abs=1e-3)


async def test_given_vectors_are_stored_instead_of_embedding_the_facts(
    memory: Either, pg_dsn: str, scope: ScopeArgs, embedder: LocalEmbedder
) -> None:
    # the vector of an unrelated text, so only the given vector can explain what is stored and found
    given = embedder.embed_documents(["the orbital mechanics of jupiter's moons", "pasta recipes"])
    ids = await memory.add_facts(NETFLIX[:2], **scope, vectors=np.asarray(given))
    with psycopg.connect(pg_dsn) as conn:
        stored = [
            json.loads(text)
            for (text,) in conn.execute(
                "SELECT embedding::text FROM memsoda.facts WHERE dataset = %s ORDER BY id", (scope["dataset"],)
            ).fetchall()
        ]
        (name_vector,) = conn.execute(
            "SELECT embedding::text FROM memsoda.entities WHERE dataset = %s AND name = 'netflix'",
            (scope["dataset"],),
        ).fetchone()  # type: ignore[misc]
    assert stored[0] == pytest.approx(given[0], abs=1e-6) and stored[1] == pytest.approx(given[1], abs=1e-6)
    # entity names are still embedded by the store's embedder
    assert json.loads(name_vector) == pytest.approx(embedder.embed_documents(["netflix"])[0], abs=1e-5)
    result = await memory.recall(query_embedding=given[0], **scope)
    assert result.facts[0].fact.id == ids[0]
    assert result.facts[0].hits[0].similarity == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_only_new_entity_names_are_embedded(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, flavour: str
) -> None:
    counting = CountingEmbedder(embedder)
    memory = await open_memory(flavour, pg_dsn, counting)
    try:
        await memory.add_facts(NETFLIX[:2], **scope)
        assert sorted(counting.documents[2:]) == ["breaking bad", "netflix", "user"]
        counting.documents.clear()
        again = {"subject": "user", "predicate": "rewatches", "object": "breaking bad", "object_type": "SHOW"}
        await memory.add_facts([again, {**again, "object": "better call saul"}], **scope)
        assert counting.documents[2:] == ["better call saul"]  # the others' stored vectors are reused
        calls = counting.document_calls
        await memory.add_facts([again], **scope, vectors=[embedder.embed_documents(["x"])[0]])
        assert counting.document_calls == calls  # nothing left to embed: no call at all
        result = await memory.recall("what do I rewatch?", **scope)
        assert {scored.fact.anchor for scored in result.facts} >= {"breaking bad", "better call saul"}
    finally:
        await memory.close()


class HookedEmbedder(CountingEmbedder):
    """The real model; `hook` runs inside each embed_documents call (sync API only)."""

    def __init__(self, inner: LocalEmbedder, hook: Any) -> None:
        super().__init__(inner)
        self.hook = hook

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.hook(texts)
        return super().embed_documents(texts)


def test_no_transaction_is_open_while_the_model_embeds_and_a_concurrent_forget_is_survived(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    seen: list[tuple[list[str], int]] = []
    in_use: list[int] = []
    delete_netflix = False

    def hook(texts: list[str]) -> None:
        if delete_netflix and "netflix" not in texts:  # between the look-up and the write
            assert other.forget(**scope, entity="netflix") == 1
        stats = memory._runner.pool.get_stats()
        in_use.append(stats["pool_size"] - stats["pool_available"])
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            (idle,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%%'"
                " AND datname = current_database()"
            ).fetchone()  # type: ignore[misc]
        seen.append((texts, int(idle)))

    with Memory.open(pg_dsn, embedder) as other, Memory.open(pg_dsn, HookedEmbedder(embedder, hook)) as memory:
        memory._runner.pool.wait()  # its minimum of connections opened, so the counts below are checked-out ones
        memory.add_facts(NETFLIX[:1], **scope)
        delete_netflix = True
        again = {"subject": "user", "predicate": "watches", "object": "netflix", "object_type": "PRODUCT"}
        (fact_id,) = memory.add_facts([again], **scope)
        assert [idle for _, idle in seen] == [0, 0, 1]  # only the rare re-embedding runs inside the write
        assert in_use == [0, 0, 1]  # and no pooled connection is held while the model runs before that
        assert seen[1][0] == ["user watches netflix. About: netflix.", "user"]  # netflix was known then
        assert seen[2][0] == ["netflix"]  # gone before the write: embedded again
        result = memory.recall("what do I watch?", **scope)
    assert any(s.fact.id == fact_id and s.fact.anchor == "netflix" for s in result.facts)


@pytest.mark.parametrize(
    ("vectors", "message"),
    [
        ([[0.1] * 384], "got 1 vectors for 2 facts"),
        ([[0.1] * 384, [0.1] * 383], "dimension 383, expected 384"),
        ([[0.1] * 384, [float("nan")] * 384], "NaN"),
        ([[0.1] * 384, [0.0] * 384], "all-zero"),
        ("not vectors", "got str, expected a list of vectors"),
    ],
)
async def test_unusable_given_vectors_raise_and_write_nothing(
    memory: Either, scope: ScopeArgs, vectors: Any, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        await memory.add_facts(NETFLIX[:2], **scope, vectors=vectors)
    assert await memory.stats(**scope) == []


async def test_mentions_and_explicit_anchor(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(
        [
            {
                "subject": "user",
                "predicate": "watches",
                "object": "breaking bad",
                "mentions": ["Netflix"],
                "anchor": "netflix",
            }
        ],
        **scope,
    )
    result = await memory.recall("netflix", **scope)
    (scored,) = result.facts
    assert scored.fact.mentions == ("netflix",)
    assert scored.fact.anchor == "netflix"


async def test_invalidate_and_supersede(memory: Either, scope: ScopeArgs) -> None:
    (old,) = await memory.add_facts(
        [{"subject": "user", "predicate": "lives in", "object": "berlin", "valid_at": "2024-01-01"}], **scope
    )
    new = await memory.supersede(
        old, {"subject": "user", "predicate": "lives in", "object": "lisbon", "valid_at": "2026-05-01"}, **scope
    )
    now = await memory.recall("where does the user live", **scope)
    assert [f.fact.object for f in now.facts] == ["lisbon"]
    then = await memory.recall("where does the user live", **scope, as_of="2025-01-01")
    assert [f.fact.object for f in then.facts] == ["berlin"]
    assert then.facts[0].fact.invalid_at is not None
    assert "(valid: 2024-01-01 – 2026-05-01)" in then.context
    assert await memory.invalidate(new, **scope) is True
    with pytest.raises(NotLiveError):  # already ended: only a live fact can be ended (issue 17)
        await memory.invalidate(new, **scope)
    assert (await memory.recall("where does the user live", **scope)).context == ""
    with pytest.raises(NotFoundError):
        await memory.invalidate(999_999_999, **scope)
    with pytest.raises(IntervalError):
        await memory.invalidate(old, **scope, at="2023-01-01")


async def test_supersede_is_atomic(memory: Either, scope: ScopeArgs) -> None:
    (old,) = await memory.add_facts(
        [{"subject": "user", "predicate": "lives in", "object": "berlin", "valid_at": "2026-01-01"}], **scope
    )
    with pytest.raises(IntervalError):  # the new fact starts before the old one: nothing changes
        await memory.supersede(
            old, {"subject": "user", "predicate": "lives in", "object": "rome", "valid_at": "2025-01-01"}, **scope
        )
    stats = await memory.stats(**scope)
    assert stats[0]["facts"] == 1


async def test_invalidate_cannot_reach_another_tenant(memory: Either, scope: ScopeArgs) -> None:
    (fact_id,) = await memory.add_facts(NETFLIX[:1], **scope)
    with pytest.raises(NotFoundError):
        await memory.invalidate(fact_id, dataset=scope["dataset"], project="someone-else")
    assert (await memory.recall("netflix", **scope)).facts


async def test_forget_entity_removes_exactly_its_facts(memory: Either, scope: ScopeArgs, pg_dsn: str) -> None:
    await memory.add_facts(NETFLIX, **scope)
    deleted = await memory.forget(**scope, entity="Breaking Bad")
    assert deleted == 2
    result = await memory.recall("what does the user drive", **scope)
    assert [f.fact.text for f in result.facts] == ["user drives honda civic"]
    stats = (await memory.stats(**scope))[0]
    assert stats["facts"] == 1
    with psycopg.connect(pg_dsn) as conn:
        names = {
            r[0] for r in conn.execute("SELECT name FROM memsoda.entities WHERE dataset = %s", (scope["dataset"],))
        }
        counts: dict[str, int] = dict(
            conn.execute(
                "SELECT name, fact_count FROM memsoda.entities WHERE dataset = %s", (scope["dataset"],)
            ).fetchall()
        )
    assert "breaking bad" not in names
    assert counts["user"] == 1  # kept in step with the facts that remain


async def test_forget_scope_leaves_other_scopes(memory: Either, scope: ScopeArgs, pg_dsn: str) -> None:
    other: ScopeArgs = {"dataset": scope["dataset"], "project": "other"}
    await memory.add_facts(NETFLIX, **scope)
    await memory.add_facts(NETFLIX, **other)
    await memory.add_episodes([{"text": "we talked about cars"}], **scope)
    assert await memory.forget(**scope) == 3
    assert await memory.stats(**scope) == []
    assert (await memory.stats(**other))[0]["facts"] == 3
    with psycopg.connect(pg_dsn) as conn:
        for table in ("facts", "entities", "fact_entities", "episodes"):
            query = psycopg.sql.SQL("SELECT count(*) FROM memsoda.{} WHERE dataset = %s AND project = %s").format(
                psycopg.sql.Identifier(table)
            )
            row = conn.execute(query, (scope["dataset"], scope["project"])).fetchone()
            assert row == (0,), table


def lexeme_counts(conn: psycopg.Connection[Any], schema: str, dataset: str, project: str) -> dict[str, Any]:
    """The scope's kept lexeme counts and the counts recomputed from its facts."""
    kept = conn.execute(
        sql.SQL("SELECT lexeme, facts FROM {}.lexemes WHERE dataset = %s AND project = %s").format(
            sql.Identifier(schema)
        ),
        (dataset, project),
    ).fetchall()
    actual = conn.execute(
        "SELECT word, ndoc FROM ts_stat(format('SELECT tsv FROM %%I.facts WHERE dataset = %%L AND project = %%L',"
        " %s::text, %s::text, %s::text))",
        (schema, dataset, project),
    ).fetchall()
    return {"kept": dict(kept), "actual": dict(actual)}


async def test_lexeme_counts_follow_every_write(memory: Either, scope: ScopeArgs, pg_dsn: str) -> None:
    def counts() -> dict[str, Any]:
        with psycopg.connect(pg_dsn) as conn:
            return lexeme_counts(conn, "memsoda", scope["dataset"], scope["project"])

    await memory.add_facts(NETFLIX, **scope)
    await memory.add_facts([*NETFLIX[:1], {"subject": "user", "predicate": "watches", "object": "netflix"}], **scope)
    after_writes = counts()
    assert after_writes["kept"] == after_writes["actual"]
    # NETFLIX[0] written again resolves to the live fact (issue 17): one more fact, not two
    assert after_writes["kept"]["netflix"] == 2 and after_writes["kept"]["bad"] == 2
    await memory.forget(**scope, entity="Breaking Bad")
    after_forget = counts()
    assert after_forget["kept"] == after_forget["actual"]
    assert after_forget["kept"]["netflix"] == 1 and "bad" not in after_forget["kept"]
    await memory.forget(**scope)
    with psycopg.connect(pg_dsn) as conn:
        left = conn.execute("SELECT count(*) FROM memsoda.lexemes WHERE dataset = %s", (scope["dataset"],)).fetchone()
    assert left == (0,)


def test_concurrent_writers_into_one_scope_keep_exact_lexeme_counts(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    """Writers into one scope, about different entities (so they do not queue on an entity row),
    bump the same lexeme rows: they take them in lexeme order, so they wait for each other instead
    of deadlocking, and no bump is lost. (With the rows taken in random order, this test hit
    PostgreSQL's deadlock detector in 1 of 3 runs.)"""
    words = [f"word{i}" for i in range(40)]
    vector = embedder.embed_documents(["x"])[0]

    def batch(seed: int) -> list[dict[str, Any]]:
        rng = random.Random(seed)
        subject = f"person {seed}"
        return [
            {
                "subject": subject,
                "predicate": "likes",
                "object": " ".join(rng.sample(words, 12)),
                "object_type": "LITERAL",
            }
            for _ in range(30)
        ]

    with Memory.open(pg_dsn, embedder, pool_size=4) as memory, ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(memory.add_facts, batch(seed), **scope, vectors=[vector] * 30) for seed in range(40)]
        for future in futures:
            future.result()
    with psycopg.connect(pg_dsn) as conn:
        counted = lexeme_counts(conn, "memsoda", scope["dataset"], scope["project"])
    assert counted["kept"] == counted["actual"] and counted["kept"]["like"] == 40 * 30


def test_concurrent_writers_sharing_entities_keep_exact_counts(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    """Writers into one scope about the same hub and the same new entities, created by whichever
    writer comes first (the others find them, a second round when one was committed while they
    waited): no error, no deadlock, and every entity's fact count equals its facts."""
    shared = [f"gadget {i}" for i in range(12)]
    vector = embedder.embed_documents(["x"])[0]

    def batch(seed: int) -> list[dict[str, Any]]:
        rng = random.Random(seed)
        picked = [*rng.sample(shared, 6), f"own {seed}"]
        # a predicate per writer: equal facts would resolve to one (issue 17); the entities are shared
        return [
            {"subject": "user", "predicate": f"owns #{seed}", "object": name, "object_type": "PRODUCT"}
            for name in picked
        ]

    with Memory.open(pg_dsn, embedder, pool_size=4) as memory, ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(memory.add_facts, batch(seed), **scope, vectors=[vector] * 7) for seed in range(40)]
        for future in futures:
            future.result()
    with psycopg.connect(pg_dsn) as conn:
        counts: dict[str, int] = dict(
            conn.execute(
                "SELECT name, fact_count FROM memsoda.entities WHERE dataset = %s AND project = %s",
                (scope["dataset"], scope["project"]),
            ).fetchall()
        )
    assert len(counts) == 1 + len(shared) + 40 and counts["user"] == 40 * 7
    assert exact_counts(pg_dsn, scope)


@contextmanager
def slow_fact_inserts(pg_dsn: str, seconds: float) -> Iterator[None]:
    """A test trigger that makes the insert of a fact whose object is "slow marker" sleep."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                """CREATE FUNCTION memsoda.test_slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
                   BEGIN PERFORM pg_sleep({}); RETURN NEW; END $$"""
            ).format(sql.Literal(seconds))
        )
        conn.execute(
            """CREATE TRIGGER test_slow_insert BEFORE INSERT ON memsoda.facts FOR EACH ROW
               WHEN (NEW.object = 'slow marker') EXECUTE FUNCTION memsoda.test_slow_insert()"""
        )
        try:
            yield
        finally:
            conn.execute("DROP TRIGGER test_slow_insert ON memsoda.facts")
            conn.execute("DROP FUNCTION memsoda.test_slow_insert()")


def exact_counts(pg_dsn: str, scope: ScopeArgs) -> bool:
    """Whether every entity's fact count equals its links and the lexeme counts equal the facts'."""
    with psycopg.connect(pg_dsn) as conn:
        off = conn.execute(
            """SELECT count(*) FROM memsoda.entities e
               WHERE e.dataset = %s AND e.project = %s
                 AND e.fact_count <> (SELECT count(*) FROM memsoda.fact_entities fe
                                      WHERE fe.dataset = e.dataset AND fe.project = e.project
                                        AND fe.entity_id = e.id)""",
            (scope["dataset"], scope["project"]),
        ).fetchone()
        counted = lexeme_counts(conn, "memsoda", scope["dataset"], scope["project"])
    return off == (0,) and counted["kept"] == counted["actual"]


TEA = {"subject": "user", "predicate": "drinks", "object": "tea", "object_type": "PRODUCT"}
SLOW = {**TEA, "object": "slow marker", "object_type": "LITERAL"}


def test_a_writer_does_not_wait_for_another_still_inserting_into_the_same_scope(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    """The counts a write bumps (its entities', the scope's lexemes', the scope's) are taken at its
    end: a writer about the same hub and words finishes while another, slowed inside its facts
    insert (a test trigger sleeps 2 s), is still there. The counts are exact afterwards."""
    vector = embedder.embed_documents(["x"])[0]
    finished: dict[str, float] = {}
    with slow_fact_inserts(pg_dsn, 2), Memory.open(pg_dsn, embedder, pool_size=4) as memory:
        memory.add_facts([TEA], **scope, vectors=[vector])  # the entities exist already

        def write(name: str, facts: list[dict[str, Any]]) -> None:
            memory.add_facts(facts, **scope, vectors=[vector] * len(facts))
            finished[name] = time.monotonic()

        with ThreadPoolExecutor(max_workers=2) as pool:
            slowed = pool.submit(write, "slowed", [SLOW])
            time.sleep(0.5)  # the slowed writer is inside its facts insert
            pool.submit(write, "other", [TEA]).result()
            slowed.result()
    assert finished["other"] < finished["slowed"]  # it did not queue behind the slowed writer
    assert exact_counts(pg_dsn, scope)


def test_a_writer_does_not_wait_for_an_import_still_inserting_into_the_same_scope(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    """An import bumps the counts of all its batches once, after its rows: a writer into the scope
    finishes while the import's second batch is held in its facts insert."""
    vector = embedder.embed_documents(["x"])[0]
    finished: dict[str, float] = {}
    lines = "".join(json.dumps({"kind": "fact", **fact}) + "\n" for fact in (TEA, SLOW))
    with slow_fact_inserts(pg_dsn, 2), Memory.open(pg_dsn, embedder, pool_size=4) as memory:
        memory.add_facts([TEA], **scope, vectors=[vector])

        def run_import() -> None:
            memory.import_jsonl(io.StringIO(lines), **scope, batch_size=1)  # the slow fact is batch 2
            finished["import"] = time.monotonic()

        def write() -> None:  # another fact: the same one would wait to be reconciled with the import's
            memory.add_facts([{**TEA, "object": "coffee"}], **scope, vectors=[vector])
            finished["other"] = time.monotonic()

        with ThreadPoolExecutor(max_workers=2) as pool:
            importing = pool.submit(run_import)
            time.sleep(0.7)  # the import's first batch is written, its second is being inserted
            pool.submit(write).result()
            importing.result()
    assert finished["other"] < finished["import"]
    assert exact_counts(pg_dsn, scope)


async def test_episodes_are_stored_and_recalled(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(NETFLIX, **scope)
    ids = await memory.add_episodes(
        [
            {"thread_id": "t1", "text": "The user planned a road trip along the coast.", "created_at": "2026-09-01"},
            {"thread_id": "t2", "text": "The user asked for a lasagne recipe."},
        ],
        **scope,
    )
    assert len(ids) == 2
    result = await memory.recall("cooking dinner", **scope, include=["episodes"])
    assert result.episodes[0].text == "The user asked for a lasagne recipe."
    assert "# EPISODES" in result.context


async def test_export_import_round_trip(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(NETFLIX, **scope)
    await memory.add_episodes([{"thread_id": "t1", "text": "talked about tv", "created_at": "2026-09-01"}], **scope)
    buffer = io.StringIO()
    assert await memory.export_jsonl(buffer, **scope) == 4
    copy: ScopeArgs = {"dataset": scope["dataset"] + "-copy", "project": scope["project"]}
    report = await memory.import_jsonl(io.StringIO(buffer.getvalue()), **copy)
    assert (report.facts, report.episodes, report.skipped) == (3, 1, 0)
    original = await memory.recall("anything good on netflix tonight?", **scope)
    imported = await memory.recall("anything good on netflix tonight?", **copy)
    assert imported.context == original.context
    again = io.StringIO()
    await memory.export_jsonl(again, **copy)
    strip = [{k: v for k, v in json.loads(line).items() if k != "id"} for line in buffer.getvalue().splitlines()]
    assert strip == [{k: v for k, v in json.loads(line).items() if k != "id"} for line in again.getvalue().splitlines()]


async def test_import_rejects_whole_file_or_skips_bad_lines(memory: Either, scope: ScopeArgs, tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    lines = [
        json.dumps(NETFLIX[0]),
        "{not json",
        json.dumps({"subject": "user", "predicate": "likes", "object": "tea", "confidence": 3}),
        json.dumps(NETFLIX[2]),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ImportFormatError, match="line 2"):
        await memory.import_jsonl(path, **scope)
    assert await memory.stats(**scope) == []  # nothing half-written
    report = await memory.import_jsonl(path, **scope, on_error="skip")
    assert (report.facts, report.skipped) == (2, 2)
    assert [line for line, _ in report.errors] == [2, 3]
    assert "confidence" in report.errors[1][1]


# --- validation: one documented error per problem, nothing written ----------------------------

GOOD = {"subject": "user", "predicate": "likes", "object": "tea"}


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"subject": "  "}, EmptyFieldError, "subject"),
        ({"predicate": ""}, EmptyFieldError, "predicate"),
        ({"object": "\n"}, EmptyFieldError, "object"),
        ({"confidence": 1.5}, ConfidenceError, "between 0 and 1"),
        ({"confidence": -0.1}, ConfidenceError, "between 0 and 1"),
        ({"confidence": float("nan")}, ConfidenceError, "between 0 and 1"),
        ({"confidence": "high"}, ConfidenceError, "number"),
        ({"valid_at": "yesterday"}, DateError, "ISO-8601"),
        ({"invalid_at": "2026-13-45"}, DateError, "ISO-8601"),
        ({"valid_at": "2026-05-01", "invalid_at": "2026-04-01"}, IntervalError, "after valid_at"),
        ({"valid_at": "2026-05-01", "invalid_at": "2026-05-01"}, IntervalError, "after valid_at"),
        ({"subject": "x" * (MAX_NAME_CHARS + 1)}, TextTooLongError, "limit"),
        ({"object": "tea\x00"}, InvalidTextError, "NUL"),
        ({"predicate": "likes \ud800"}, InvalidTextError, "UTF-8"),
        ({"mentions": "netflix"}, ValidationError, "list"),
        ({"colour": "red"}, ValidationError, "unknown field"),
    ],
)
async def test_each_validation_error(
    memory: Either, scope: ScopeArgs, change: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        await memory.add_facts([GOOD, {**GOOD, **change}], **scope)
    assert await memory.stats(**scope) == []


@pytest.mark.parametrize(
    "bad_scope",
    [{"dataset": "", "project": "p"}, {"dataset": "d", "project": None}, {"dataset": "d", "project": 7}],
)
async def test_missing_or_bad_scope(memory: Either, bad_scope: dict[str, Any]) -> None:
    with pytest.raises(ScopeError):
        await memory.add_facts([GOOD], **bad_scope)
    with pytest.raises(ScopeError):
        await memory.recall("tea", **bad_scope)


async def test_validation_errors_name_the_fact(memory: Either, scope: ScopeArgs) -> None:
    with pytest.raises(EmptyFieldError, match=r"fact #2.*subject"):
        await memory.add_facts([GOOD, {**GOOD, "subject": ""}], **scope)
    with pytest.raises(EmptyFieldError, match="missing 'object'"):
        await memory.add_facts([{"subject": "a", "predicate": "b"}], **scope)


async def test_batch_limit(memory: Either, scope: ScopeArgs) -> None:
    with pytest.raises(LimitError, match=str(MAX_BATCH)):
        await memory.add_facts([GOOD] * (MAX_BATCH + 1), **scope)


# --- atomicity when the embedder fails ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["raise", "nan", "wrong_dim", "short"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_failed_embedding_writes_nothing(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, mode: str, flavour: str
) -> None:
    faulty = FaultyEmbedder(embedder)
    memory = await open_memory(flavour, pg_dsn, faulty)
    try:
        await memory.add_facts(NETFLIX[:1], **scope)
        faulty.mode = mode
        with pytest.raises(EmbeddingError):
            await memory.add_facts(NETFLIX, **scope)
        with pytest.raises(EmbeddingError):
            await memory.add_episodes([{"text": "hello"}], **scope)
        faulty.mode = None
        assert (await memory.stats(**scope))[0]["facts"] == 1
        assert (await memory.stats(**scope))[0]["episodes"] == 0
        assert count_rows(pg_dsn, "entities", scope["dataset"]) == 2
    finally:
        await memory.close()


# --- the embedded server -------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from memsoda_core import Memory
    memory = Memory.open(home=sys.argv[1])
    memory.add_facts([{"subject": "user", "predicate": "owns", "object": sys.argv[2]}],
                     dataset="d", project="p")
    print("ready", flush=True)
    if sys.argv[3] == "hang":
        time.sleep(600)
    memory.close()
    """
)


def _child(home: Path, thing: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), thing, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


@pytest.mark.slow
def test_embedded_server_survives_close_reopen_other_processes_and_sigkill(embedder: LocalEmbedder) -> None:
    home = Path(tempfile.mkdtemp(prefix="memsoda-home-"))
    try:
        with Memory.open(home=home, embedder=embedder) as memory:
            memory.add_facts(
                [{"subject": "user", "predicate": "owns", "object": "a red bike"}], dataset="d", project="p"
            )
            # a second process opening the same home reuses the running server
            child = _child(home, "a blue kayak", "close")
            _, err = child.communicate(timeout=180)
            assert child.returncode == 0, err
            assert len(memory.recall("what does the user own", dataset="d", project="p").facts) == 2
        # facts survive close and reopen
        with Memory.open(home=home, embedder=embedder) as memory:
            assert len(memory.recall("what does the user own", dataset="d", project="p").facts) == 2
        # a process killed with SIGKILL while holding the server does not break the next open
        child = _child(home, "a green tent", "hang")
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)  # reaps it and closes its pipes
        with Memory.open(home=home, embedder=embedder) as memory:
            owned = {f.fact.object for f in memory.recall("what does the user own", dataset="d", project="p").facts}
            assert owned == {"a red bike", "a blue kayak", "a green tent"}
        # the last close stopped the server: nothing is left running on this data directory
        pid_file = home / "pg" / "postmaster.pid"
        assert not pid_file.exists()
    finally:
        shutil.rmtree(home, ignore_errors=True)
