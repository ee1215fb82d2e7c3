"""Changing a store's embedding model online (`Memory.reembed`, `memsoda reembed`), against the real
server: every vector of the new model, as the write path would have made it, on one node in both
layouts; recall on the old vectors during the run and writes made meanwhile caught up; a re-embed
killed with SIGKILL and resumed without embedding its committed batches again; a second re-embed a
no-op; an embedder whose output is wrong leaving the store on its model. The real offline model is
one side of every re-embed, a deterministic hash embedder of another dimension the other.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from bench.hashembed import HashEmbedder
from memsoda_core import EmbedderMismatchError, EmbeddingError, LocalEmbedder, Memory, ScopeArgs
from memsoda_core.cli import app
from memsoda_core.text import fact_embedding_text
from tests.conftest import Either, open_memory

ROOT = Path(__file__).resolve().parent.parent
NEW_DIMENSIONS = 64
BIG: ScopeArgs = {"dataset": "big", "project": "p"}
SMALL: ScopeArgs = {"dataset": "small", "project": "p"}
THRESHOLD = 20  # the big scope gets its own partitions (or partial indexes) and vector indexes


class NewModel(HashEmbedder):
    """The hash embedder (64 dimensions), counting its calls and texts; `hook(texts)` runs before
    each call, `spoil(call, vectors)` may break its answer."""

    def __init__(
        self,
        hook: Callable[[list[str]], None] | None = None,
        spoil: Callable[[int, list[list[float]]], list[list[float]]] | None = None,
    ) -> None:
        super().__init__(NEW_DIMENSIONS)
        self.calls = 0
        self.texts: list[str] = []
        self._hook, self._spoil = hook, spoil

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self._hook is not None:
            self._hook(texts)
        self.texts += texts
        vectors = super().embed_documents(texts)
        return self._spoil(self.calls, vectors) if self._spoil is not None else vectors

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)


def fill(memory: Memory) -> None:
    """A big scope (moved to its own partitions, or given partial indexes), a small one with an
    item and episodes."""
    memory.add_facts(
        [{"subject": "user", "predicate": "likes", "object": f"thing {i}"} for i in range(THRESHOLD + 10)], **BIG
    )
    memory.add_facts(
        [
            {"subject": "user", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
            {"subject": "honda civic", "predicate": "has color", "object": "blue", "object_type": "LITERAL"},
            {"subject": "user", "predicate": "lives in", "object": "lisbon", "object_type": "LOCATION"},
        ],
        **SMALL,
    )
    memory.add_episodes([{"text": "we talked about cars"}, {"text": "a trip to the coast"}], **SMALL)
    memory.put_items([{"namespace": ["notes"], "key": "k1", "value": {}, "text": "prefers window seats"}], **SMALL)
    memory.maintain()


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    name = f"reembed_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def rows_with_vectors(dsn: str, schema: str) -> dict[tuple[str, str, str], list[float]]:
    """(table, dataset, the text its vector is made of) -> the stored vector, of every row."""
    s = sql.Identifier(schema)
    out: dict[tuple[str, str, str], list[float]] = {}
    with psycopg.connect(dsn) as conn:
        for ds, name, vector in conn.execute(
            sql.SQL("SELECT dataset, name, embedding::text FROM {}.entities").format(s)
        ):
            out["entities", ds, name] = json.loads(vector)
        for ds, text, vector in conn.execute(
            sql.SQL("SELECT dataset, text, embedding::text FROM {}.episodes").format(s)
        ):
            out["episodes", ds, text] = json.loads(vector)
        facts = sql.SQL(
            """SELECT f.dataset, f.subject, f.predicate, f.object, a.name, f.embedding::text FROM {s}.facts f
               JOIN {s}.entities a ON a.dataset = f.dataset AND a.project = f.project AND a.id = f.anchor_id"""
        ).format(s=s)
        for ds, subject, predicate, obj, anchor, vector in conn.execute(facts):
            out["facts", ds, fact_embedding_text(subject, predicate, obj, anchor)] = json.loads(vector)
    return out


def vector_columns(dsn: str, schema: str) -> dict[tuple[str, str], str]:
    """(table, column) -> type of every vector column of the store's tables (partitions left out)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            """SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
               JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %s AND c.relname IN ('facts', 'entities', 'episodes')
                 AND a.attnum > 0 AND NOT a.attisdropped AND format_type(a.atttypid, a.atttypmod) LIKE 'vector%%'""",
            (schema,),
        ).fetchall()
    return {(table, column): kind for table, column, kind in rows}


def vector_indexes(dsn: str, schema: str) -> dict[str, tuple[bool, str]]:
    """HNSW index name -> (valid, its definition), in the schema."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            """SELECT c.relname, i.indisvalid, pg_get_indexdef(c.oid) FROM pg_index i
               JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_am am ON am.oid = c.relam
               WHERE n.nspname = %s AND am.amname = 'hnsw'""",
            (schema,),
        ).fetchall()
    return {name: (valid, definition) for name, valid, definition in rows}


def meta(dsn: str, schema: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(sql.SQL("SELECT key, value FROM {}.meta").format(sql.Identifier(schema))).fetchall()
    return dict(rows)


def table_counts(dsn: str, schema: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return {
            table: int(
                conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
                ).fetchall()[0][0]
            )
            for table in ("entities", "facts", "episodes")
        }


def row_count(dsn: str, schema: str) -> int:
    return sum(table_counts(dsn, schema).values())


@pytest.mark.parametrize("layout", ["partitioned", "plain"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_every_vector_moves_to_the_new_model_in_one_switch(
    pg_dsn: str, embedder: LocalEmbedder, schema: str, layout: str, flavour: str
) -> None:
    with Memory.open(pg_dsn, embedder, schema=schema, layout=layout, tenant_index_min_facts=THRESHOLD) as seed:
        fill(seed)
    old_indexes = vector_indexes(pg_dsn, schema)
    assert len(old_indexes) == 3  # the big scope's facts and entity names, and the episodes
    total = row_count(pg_dsn, schema)
    new = NewModel()
    memory: Either = await open_memory(flavour, pg_dsn, embedder, schema=schema)
    try:
        report = await memory.reembed(new, batch_size=16)
        assert report.switched and not report.resumed
        assert (report.model, report.dimensions) == (new.model, NEW_DIMENSIONS)
        assert report.embedded == total == len(new.texts) and report.caught_up == 0
        assert new.calls == sum(-(-n // 16) for n in table_counts(pg_dsn, schema).values())  # a call per batch
        # this memory now speaks the new model: vector recall over the new vectors
        result = await memory.recall("user likes thing 7", **BIG)
        assert result.facts[0].fact.object == "thing 7" and "vector" in result.facts[0].ranks
        # a second re-embed to the same model is a no-op
        again = await memory.reembed(new)
        calls = new.calls
        assert not again.switched and again.embedded == 0 and new.calls == calls
    finally:
        await memory.close()
    # every vector is the new model's, of the text the write path embeds
    stored = rows_with_vectors(pg_dsn, schema)
    assert len(stored) == total
    for (table, _, text), vector in stored.items():
        assert len(vector) == NEW_DIMENSIONS
        np.testing.assert_allclose(vector, new.embed_query(text), atol=1e-6, err_msg=f"{table}: {text}")
    # written by the write path with the new model, the same facts get the same vectors
    written_schema = f"{schema}_w"
    try:
        with Memory.open(pg_dsn, NewModel(), schema=written_schema, layout=layout) as direct:
            fill(direct)
        written = rows_with_vectors(pg_dsn, written_schema)
        assert written.keys() == stored.keys()
        for key, vector in written.items():
            np.testing.assert_allclose(stored[key], vector, atol=1e-6)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(written_schema)))
    # one column of the new dimension, the indexes rebuilt over it under their names, meta switched
    assert vector_columns(pg_dsn, schema) == {
        (table, "embedding"): f"vector({NEW_DIMENSIONS})" for table in ("facts", "entities", "episodes")
    }
    indexes = vector_indexes(pg_dsn, schema)
    assert indexes.keys() == old_indexes.keys() == set(report.indexes)
    assert all(valid and "(embedding vector_cosine_ops)" in definition for valid, definition in indexes.values())
    recorded = meta(pg_dsn, schema)
    assert (recorded["model"], recorded["dimensions"]) == (new.model, str(NEW_DIMENSIONS))
    assert "reembed" not in recorded
    # the old model is refused, with advice naming reembed; the new one opens the store
    with pytest.raises(EmbedderMismatchError, match="memsoda reembed"):
        Memory.open(pg_dsn, embedder, schema=schema)
    with Memory.open(pg_dsn, NewModel(), schema=schema) as reopened:
        found = reopened.recall("which color is the honda civic", **SMALL)
        assert found.facts[0].fact.object == "blue" and "vector" in found.facts[0].ranks
        items = reopened.search_items(["notes"], query="window seats", **SMALL)
        assert [item.key for item in items] == ["k1"]


def test_recall_reads_the_old_vectors_until_the_switch_and_writes_meanwhile_are_caught_up(
    pg_dsn: str, embedder: LocalEmbedder, schema: str
) -> None:
    with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD) as seed:
        fill(seed)
    other = Memory.open(pg_dsn, embedder, schema=schema)  # another process on the old model
    question = "what does the user drive"
    before = other.recall(question, **SMALL)
    seen: list[list[tuple[int, float]]] = []

    def during(texts: list[str]) -> None:
        if "we talked about cars" in texts and not seen:  # the entities and facts are done, the episodes next
            during_run = other.recall(question, **SMALL)
            seen.append([(f.fact.id, f.score) for f in during_run.facts])
            assert meta(pg_dsn, schema)["model"] == embedder.model
            other.add_facts([{"subject": "user", "predicate": "owns", "object": "a red kayak"}], **SMALL)
            other.add_episodes([{"text": "planned a kayak trip"}], **SMALL)

    new = NewModel(hook=during)
    try:
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            report = memory.reembed(new, batch_size=8)
            assert seen == [[(f.fact.id, f.score) for f in before.facts]]  # the old vectors, unchanged
            # written with the old model: the fact and its new entity behind the cursor, caught up before
            # the switch; the episode ahead of it, re-embedded by the main pass
            assert report.caught_up == 2 and report.embedded == row_count(pg_dsn, schema) - 2
            found = memory.recall("does the user own a red kayak", **SMALL)
            assert found.facts[0].fact.object == "a red kayak" and "vector" in found.facts[0].ranks
            episodes = memory.recall("kayak trip", **SMALL, include=["episodes"]).episodes
            assert episodes[0].text == "planned a kayak trip"
    finally:
        other.close()
    stored = rows_with_vectors(pg_dsn, schema)
    for text in ("user owns a red kayak. About: a red kayak.", "planned a kayak trip"):
        key = next(k for k in stored if k[2] == text)
        np.testing.assert_allclose(stored[key], new.embed_query(text), atol=1e-6)


KILLED = textwrap.dedent(
    """
    import json, sys, time
    from bench.hashembed import HashEmbedder
    from memsoda_core import Memory

    class OldSpace:
        '''The store's own model and dimension, never called: a re-embed embeds with the new one.'''
        def __init__(self, model, dimensions):
            self.model, self.dimensions = model, dimensions
        def embed_documents(self, texts): raise AssertionError("the old model embedded")
        def embed_query(self, text): raise AssertionError("the old model embedded")
        async def aembed_documents(self, texts): raise AssertionError("the old model embedded")
        async def aembed_query(self, text): raise AssertionError("the old model embedded")

    class Recording(HashEmbedder):
        '''Logs each call's texts; the fourth call never returns (the process is killed there).'''
        calls = 0
        def embed_documents(self, texts):
            self.calls += 1
            with open(sys.argv[3], "a") as log:
                log.write(json.dumps(texts) + "\\n")
            if self.calls == 4:
                time.sleep(600)
            return super().embed_documents(texts)

    dsn, schema, _, model, dims = sys.argv[1:6]
    with Memory.open(dsn, OldSpace(model, int(dims)), schema=schema) as memory:
        memory.reembed(Recording(64), batch_size=int(sys.argv[6]))
    """
)


def test_a_killed_reembed_resumes_without_embedding_its_committed_batches(
    pg_dsn: str, embedder: LocalEmbedder, schema: str, tmp_path: Path
) -> None:
    batch = 8
    with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD) as seed:
        fill(seed)
        before = seed.recall("what does the user drive", **SMALL)
    total = row_count(pg_dsn, schema)
    log = tmp_path / "calls.jsonl"
    args = [pg_dsn, schema, str(log), embedder.model, str(embedder.dimensions), str(batch)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", KILLED, *args], env=env, cwd=ROOT, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not log.exists() or len(log.read_text().splitlines()) < 4:
            assert child.poll() is None, child.communicate()[1].decode()
            assert time.monotonic() < deadline, "the re-embed never reached its fourth batch"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    committed = [text for texts in calls[:3] for text in texts]
    assert len(committed) == 3 * batch
    # killed mid-run: still on the old model, recall unchanged, three batches of new vectors kept
    assert meta(pg_dsn, schema)["model"] == embedder.model
    with psycopg.connect(pg_dsn) as conn:
        done = sum(
            conn.execute(
                sql.SQL("SELECT count(*) FROM {}.{} WHERE embedding_next IS NOT NULL").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            ).fetchall()[0][0]
            for table in ("entities", "facts", "episodes")
        )
    assert done == 3 * batch
    new = NewModel()
    with Memory.open(pg_dsn, embedder, schema=schema) as memory:
        assert [f.fact.id for f in memory.recall("what does the user drive", **SMALL).facts] == [
            f.fact.id for f in before.facts
        ]
        report = memory.reembed(new, batch_size=batch)
    assert report.switched and report.resumed
    # the resume embedded every row but the committed batches, the killed batch included
    assert report.embedded == len(new.texts) == total - 3 * batch
    assert sorted(new.texts + committed) == sorted(text for _, _, text in rows_with_vectors(pg_dsn, schema))
    assert calls[3] == new.texts[: len(calls[3])]
    with Memory.open(pg_dsn, NewModel(), schema=schema) as reopened:
        assert reopened.recall("user likes thing 3", **BIG).facts[0].fact.object == "thing 3"


@pytest.mark.parametrize("fault", ["wrong_dim", "nan", "short"])
def test_an_embedder_with_wrong_output_leaves_the_store_on_its_model(
    pg_dsn: str, embedder: LocalEmbedder, schema: str, fault: str
) -> None:
    def spoil(call: int, vectors: list[list[float]]) -> list[list[float]]:
        if call < 2:
            return vectors
        if fault == "wrong_dim":
            return [v[:-1] for v in vectors]
        if fault == "nan":
            return [[float("nan")] * len(v) for v in vectors]
        return vectors[:-1]

    with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD) as memory:
        fill(memory)
        before = memory.recall("what does the user drive", **SMALL)
        with pytest.raises(EmbeddingError):
            memory.reembed(NewModel(spoil=spoil), batch_size=8)
        # still the old model, in meta, in its columns and in recall
        assert meta(pg_dsn, schema)["model"] == embedder.model
        assert vector_columns(pg_dsn, schema)["facts", "embedding"] == f"vector({embedder.dimensions})"
        after = memory.recall("what does the user drive", **SMALL)
        assert [(f.fact.id, f.score) for f in after.facts] == [(f.fact.id, f.score) for f in before.facts]
        memory.add_facts([{"subject": "user", "predicate": "reads", "object": "poetry"}], **SMALL)
        # the half-done run can be dropped: its columns go, nothing else changes
        assert memory.abandon_reembed() and not memory.abandon_reembed()
    assert set(vector_columns(pg_dsn, schema)) == {(t, "embedding") for t in ("facts", "entities", "episodes")}
    assert "reembed" not in meta(pg_dsn, schema)
    with Memory.open(pg_dsn, embedder, schema=schema) as reopened:
        assert reopened.recall("what does the user read", **SMALL).facts[0].fact.object == "poetry"


def test_reembed_refuses_bad_arguments(pg_dsn: str, embedder: LocalEmbedder, schema: str) -> None:
    from memsoda_core.errors import ConfigurationError

    with Memory.open(pg_dsn, embedder, schema=schema) as memory:
        with pytest.raises(ConfigurationError, match="batch_size"):
            memory.reembed(NewModel(), batch_size=0)
        with pytest.raises(ConfigurationError, match="holds at most 2000"):
            memory.reembed(HashEmbedder(2001))
    assert "reembed" not in meta(pg_dsn, schema)


def test_the_cli_reembeds_to_the_real_model(pg_dsn: str, embedder: LocalEmbedder, schema: str) -> None:
    with Memory.open(pg_dsn, HashEmbedder(NEW_DIMENSIONS), schema=schema) as memory:
        fill(memory)
    runner = CliRunner()
    base = ["--dsn", pg_dsn, "--schema", schema, "reembed"]
    result = runner.invoke(app, [*base, "--embedder", "local", "--json"], env={"MEMSODA_EMBEDDER": ""})
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["switched"] and report["dimensions"] == embedder.dimensions and report["model"] == embedder.model
    again = runner.invoke(app, [*base, "--embedder", "local"], env={"MEMSODA_EMBEDDER": ""})
    assert again.exit_code == 0 and "nothing to do" in again.stdout
    with Memory.open(pg_dsn, embedder, schema=schema) as reopened:
        found = reopened.recall("which color is the honda civic", **SMALL)
        assert found.facts[0].fact.object == "blue" and "vector" in found.facts[0].ranks
    stored = rows_with_vectors(pg_dsn, schema)
    some = sorted(stored)[:5]
    expected = embedder.embed_documents([text for _, _, text in some])
    for key, vector in zip(some, expected, strict=True):
        np.testing.assert_allclose(stored[key], vector, atol=1e-5)


def test_a_writer_running_through_the_switch_loses_nothing(pg_dsn: str, embedder: LocalEmbedder, schema: str) -> None:
    """A writer on the old model writes throughout; every write that succeeded is in the store
    with the new model's vector once the switch is done, and the writer's next write after the
    switch fails (its process must reopen the store with the new model)."""
    import threading

    from memsoda_core.errors import MemsodaError, StoreError

    with Memory.open(pg_dsn, embedder, schema=schema, tenant_index_min_facts=THRESHOLD) as seed:
        fill(seed)
    written: list[str] = []
    failure: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        with Memory.open(pg_dsn, embedder, schema=schema) as writer:
            for i in range(10_000):
                if stop.is_set():
                    return
                try:
                    writer.add_facts([{"subject": f"writer {i}", "predicate": "wrote", "object": f"note {i}"}], **SMALL)
                except MemsodaError as exc:
                    failure.append(exc)
                    return
                written.append(f"note {i}")

    thread = threading.Thread(target=write)
    thread.start()
    try:
        while len(written) < 3:
            time.sleep(0.01)
        with Memory.open(pg_dsn, embedder, schema=schema) as memory:
            report = memory.reembed(NewModel(), batch_size=8)
        deadline = time.monotonic() + 60
        while thread.is_alive() and not failure and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert report.switched and len(written) >= 3
    assert failure, "the writer on the old model kept writing after the switch"
    assert isinstance(failure[0], StoreError) and "expected 64 dimensions" in str(failure[0])
    stored = rows_with_vectors(pg_dsn, schema)
    new = NewModel()
    notes = {text: vector for (table, _, text), vector in stored.items() if table == "facts" and "wrote note" in text}
    assert len(notes) == len(written)
    for text, vector in notes.items():
        np.testing.assert_allclose(vector, new.embed_query(text), atol=1e-6)
