"""Which embedder a store opens with, through `Memory.open` / `AsyncMemory.open` and the CLI, against
the real server: an existing store's recorded model wins over OPENAI_API_KEY, a new store takes the
environment's default, MEMSODA_EMBEDDER and --embedder choose explicitly, and a mismatch says why
and what to do. OpenAI is tests/fake_openai.py (the real protocol) through OPENAI_BASE_URL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from memsoda_core import AsyncMemory, LocalEmbedder, Memory, ScopeArgs, embedders
from memsoda_core.cli import app
from memsoda_core.embedders.choice import parse_spec
from memsoda_core.embedders.openai import OpenAIEmbedder
from memsoda_core.errors import ConfigurationError, EmbedderMismatchError
from tests.conftest import open_memory
from tests.fake_openai import FakeOpenAI

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SMALL = "text-embedding-3-small"
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
FACT = {"subject": "user", "predicate": "drinks", "object": "green tea"}

flavours = pytest.mark.parametrize("flavour", ["sync", "async"])


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A schema of its own (no store in it yet), dropped at the end."""
    name = f"memsoda_choice_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """OPENAI_API_KEY exported (as most LangChain developers have it), OpenAI answered by the fake."""
    monkeypatch.delenv("MEMSODA_EMBEDDER", raising=False)
    monkeypatch.delenv("MEMSODA_OPENAI_MODEL", raising=False)
    with FakeOpenAI() as fake:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        yield fake


@pytest.fixture
def local_store(pg_dsn: str, schema: str, embedder: LocalEmbedder, scope: ScopeArgs) -> str:
    """A store made offline (the local model) holding one fact in `scope`."""
    with Memory.open(pg_dsn, embedder, schema=schema) as memory:
        memory.add_facts([FACT], **scope)
    return schema


async def close(memory: Memory | AsyncMemory) -> None:
    if isinstance(memory, AsyncMemory):
        await memory.close()
    else:
        memory.close()


# --- Memory.open -------------------------------------------------------------------------------------


def test_the_package_names_the_openai_embedder() -> None:
    """`memsoda_core.embedders.OpenAIEmbedder` is its module's class, loaded on first use."""
    assert embedders.OpenAIEmbedder is OpenAIEmbedder


@flavours
async def test_a_local_store_opened_with_an_openai_key_keeps_the_local_model(
    flavour: str, pg_dsn: str, local_store: str, openai: FakeOpenAI, scope: ScopeArgs
) -> None:
    memory = await open_memory(flavour, pg_dsn, None, schema=local_store)
    try:
        assert (memory.info.model, memory.info.dimensions) == (MINILM, 384)
        result = await memory.recall("what does the user drink?", **scope)
        assert not result.degraded and [f.fact.text for f in result.facts] == ["user drinks green tea"]
        assert result.facts[0].ranks.get("vector") == 1
    finally:
        await close(memory.raw)
    assert openai.requests() == []  # nothing went to OpenAI


@flavours
async def test_a_new_store_with_the_key_takes_openai(
    flavour: str, pg_dsn: str, schema: str, openai: FakeOpenAI, scope: ScopeArgs
) -> None:
    memory = await open_memory(flavour, pg_dsn, None, schema=schema)
    try:
        assert (memory.info.model, memory.info.dimensions) == (SMALL, 1536)
        await memory.add_facts([FACT], **scope)
    finally:
        await close(memory.raw)
    sent = openai.requests("embeddings")
    assert sent and all(r.body["model"] == SMALL for r in sent)


def test_an_openai_store_reopens_with_its_recorded_dimension(
    pg_dsn: str, schema: str, openai: FakeOpenAI, scope: ScopeArgs
) -> None:
    made = OpenAIEmbedder(SMALL, dimensions=256, base_url=openai.base_url)
    with Memory.open(pg_dsn, made, schema=schema) as memory:
        memory.add_facts([FACT], **scope)
    made.close()
    openai.reset()
    with Memory.open(pg_dsn, schema=schema) as memory:
        assert (memory.info.model, memory.info.dimensions) == (SMALL, 256)
        result = memory.recall("what does the user drink?", **scope)
    assert not result.degraded and result.facts[0].fact.text == "user drinks green tea"
    (request,) = openai.requests("embeddings")  # the query only: no dimension probe
    assert request.body["dimensions"] == 256


def test_an_openai_store_without_a_key_says_how_to_open_it(
    pg_dsn: str, schema: str, openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    Memory.open(pg_dsn, schema=schema).close()  # made with OpenAI
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ConfigurationError, match=f"vectors of '{SMALL}'.*set OPENAI_API_KEY"):
        Memory.open(pg_dsn, schema=schema)


@flavours
async def test_memsoda_embedder_local_wins_over_the_key_for_a_new_store(
    flavour: str, pg_dsn: str, schema: str, openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSODA_EMBEDDER", "local")
    memory = await open_memory(flavour, pg_dsn, None, schema=schema)
    try:
        assert memory.info.model == MINILM
    finally:
        await close(memory.raw)
    assert openai.requests() == []


def test_memsoda_embedder_names_an_openai_model(
    pg_dsn: str, schema: str, openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSODA_EMBEDDER", "openai:text-embedding-ada-002")
    with Memory.open(pg_dsn, schema=schema) as memory:
        assert (memory.info.model, memory.info.dimensions) == ("text-embedding-ada-002", 1536)


@flavours
async def test_memsoda_embedder_against_the_store_is_a_mismatch_naming_it(
    flavour: str, pg_dsn: str, local_store: str, openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSODA_EMBEDDER", "openai")
    with pytest.raises(EmbedderMismatchError) as caught:
        await open_memory(flavour, pg_dsn, None, schema=local_store)
    message = str(caught.value)
    assert f"384-dimensional vectors of '{MINILM}'" in message
    assert f"MEMSODA_EMBEDDER=openai is set, so the embedder is '{SMALL}' with 1536 dimensions" in message
    assert "unset MEMSODA_EMBEDDER, or set MEMSODA_EMBEDDER=local, or use another schema" in message


def test_an_explicit_embedder_of_another_model_says_to_leave_it_out(
    pg_dsn: str, local_store: str, openai: FakeOpenAI
) -> None:
    other = OpenAIEmbedder(SMALL, base_url=openai.base_url)
    with pytest.raises(EmbedderMismatchError, match=r"an embedder was passed to open\(\).*open it without embedder="):
        Memory.open(pg_dsn, other, schema=local_store)
    other.close()


def test_a_bad_memsoda_embedder_is_a_configuration_error(
    pg_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSODA_EMBEDDER", "hugging:face")
    with pytest.raises(ConfigurationError, match="MEMSODA_EMBEDDER='hugging:face' is not an embedder"):
        Memory.open(pg_dsn, schema=schema)


@pytest.mark.parametrize(
    ("text", "kind", "model"),
    [
        ("local", "local", MINILM),
        ("openai", "openai", SMALL),
        (" OpenAI:text-embedding-3-large ", "openai", "text-embedding-3-large"),
    ],
)
def test_spec_syntax(text: str, kind: str, model: str) -> None:
    spec = parse_spec(text, environ={})
    assert (spec.kind, spec.model) == (kind, model)
    assert parse_spec(spec.text, environ={}) == spec


@pytest.mark.parametrize("text", ["", "local:", "openai:", "hf:x", "local:/some/dir"])
def test_bad_specs(text: str) -> None:
    with pytest.raises(ConfigurationError, match="use local, openai or openai:MODEL"):
        parse_spec(text, environ={})


# --- the CLI -------------------------------------------------------------------------------------------


def invoke(pg_dsn: str, schema: str, *args: str) -> Any:
    return CliRunner().invoke(app, ["--dsn", pg_dsn, "--schema", schema, *args], env=ENV)


def scope_args(scope: ScopeArgs) -> list[str]:
    return ["--dataset", scope["dataset"], "--project", scope["project"]]


def test_cli_recall_on_a_local_store_with_the_key_set(
    pg_dsn: str, local_store: str, openai: FakeOpenAI, scope: ScopeArgs
) -> None:
    result = invoke(pg_dsn, local_store, "recall", "what does the user drink?", *scope_args(scope), "--json")
    assert result.exit_code == 0, result.output
    assert "user drinks green tea" in result.stdout and '"degraded": false' in result.stdout
    assert openai.requests() == []


def test_cli_embedder_option_against_the_store(
    pg_dsn: str, local_store: str, openai: FakeOpenAI, scope: ScopeArgs
) -> None:
    result = invoke(pg_dsn, local_store, "--embedder", "openai", "recall", "tea?", *scope_args(scope))
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("error: this store holds 384-dimensional vectors")
    assert "--embedder openai was given" in line and "drop --embedder, or use --embedder local" in line
    assert openai.requests() == []


def test_cli_embedder_option_and_env_choose_a_new_store(
    pg_dsn: str, schema: str, openai: FakeOpenAI, scope: ScopeArgs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSODA_EMBEDDER", "openai")  # the option wins over the variable
    added = invoke(pg_dsn, schema, "--embedder", "local", "add", *scope_args(scope), "-s", "user", "-P", "p", "-o", "x")
    assert added.exit_code == 0, added.output
    with Memory.open(pg_dsn, LocalEmbedder(), schema=schema) as memory:
        assert memory.info.model == MINILM
    assert openai.requests() == []
    # The variable alone now disagrees with the store, and the doctor says so and what to do.
    doctor = invoke(pg_dsn, schema, "doctor")
    assert doctor.exit_code == 1
    assert "MEMSODA_EMBEDDER=openai is set" in doctor.stdout and "set MEMSODA_EMBEDDER=local" in doctor.stdout


def test_cli_bad_embedder_option(pg_dsn: str, schema: str, scope: ScopeArgs) -> None:
    result = invoke(pg_dsn, schema, "--embedder", "bert", "recall", "x", *scope_args(scope))
    assert result.exit_code == 1
    assert "--embedder='bert' is not an embedder" in result.stderr


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_an_embedder_wider_than_the_vector_index_is_refused_before_anything_is_written(
    flavour: str, pg_dsn: str, embedder: LocalEmbedder
) -> None:
    """text-embedding-3-large gives 3,072 dimensions; pgvector's HNSW index holds 2,000. A new store
    says so (not "PostgreSQL is unavailable") and no schema is left behind."""
    from tests.helpers import OtherModel

    schema = f"wide_{uuid.uuid4().hex[:8]}"
    wide = OtherModel(embedder, model="text-embedding-3-large", dimensions=3072)
    with pytest.raises(ConfigurationError, match="at most 2000"):
        await open_memory(flavour, pg_dsn, wide, schema=schema)
    with psycopg.connect(pg_dsn) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    assert found is None
