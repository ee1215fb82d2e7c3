"""OpenAIEmbedder and OpenAISynthesizer against a local OpenAI-compatible server (tests/fake_openai.py):
the real `openai` client on the real wire protocol, no internet. End-to-end tests write and recall
through Memory and AsyncMemory on the real PostgreSQL, in a schema of their own (the fake model's
vectors are another space than the local model's)."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from memsoda_core import (
    AsyncMemory,
    ConfigurationError,
    EmbeddingError,
    LocalEmbedder,
    Memory,
    OpenAISynthesizer,
    RecallOptions,
    ScopeArgs,
    default_embedder,
)
from memsoda_core.embedders import check_vectors
from memsoda_core.embedders.openai import KNOWN_DIMENSIONS, OpenAIEmbedder
from tests.conftest import Either
from tests.fake_openai import DEFAULT_DIMENSIONS, FakeOpenAI, Fault, hashing_embedding

MINILM = "fake-minilm"
"""The fake server's name for vectors computed by the real local model (384 dimensions)."""

FACTS = [
    {
        "subject": "Alice",
        "subject_type": "PERSON",
        "predicate": "likes",
        "object": "green tea",
        "object_type": "LITERAL",
    },
    {"subject": "Alice", "subject_type": "PERSON", "predicate": "works at", "object": "Acme", "object_type": "ORG"},
    {"subject": "Bob", "subject_type": "PERSON", "predicate": "lives in", "object": "Paris", "object_type": "CITY"},
    {"subject": "Bob", "subject_type": "PERSON", "predicate": "plays", "object": "the cello", "object_type": "LITERAL"},
]


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A fresh fake server with hashing embeddings (64 dimensions for unknown models)."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def minilm_server(embedder: LocalEmbedder) -> Iterator[FakeOpenAI]:
    """A fake server whose `fake-minilm` vectors come from the real offline model."""

    def embed(texts: list[str], dimensions: int) -> list[list[float]]:
        return embedder.embed_documents(texts)

    with FakeOpenAI(embed=embed, dimensions={MINILM: embedder.dimensions}) as fake:
        yield fake


@pytest.fixture
async def make_embedder() -> AsyncIterator[Callable[..., OpenAIEmbedder]]:
    """Build OpenAIEmbedders; their connections are closed after the test."""
    made: list[OpenAIEmbedder] = []

    def make(*args: Any, **kwargs: Any) -> OpenAIEmbedder:
        made.append(OpenAIEmbedder(*args, **kwargs))
        return made[-1]

    yield make
    for item in made:
        await item.aclose()


@pytest.fixture(scope="session")
def openai_schema(pg_dsn: str) -> Iterator[str]:
    """A schema for the fake-minilm vector space, dropped at the end of the session."""
    name = f"memsoda_oai_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


OpenMemory = Callable[..., Awaitable[Either]]


@pytest.fixture(params=["sync", "async"])
async def open_memory(
    request: pytest.FixtureRequest, pg_dsn: str, openai_schema: str, minilm_server: FakeOpenAI
) -> AsyncIterator[OpenMemory]:
    """Open a Memory or an AsyncMemory (each test runs with both) on an OpenAIEmbedder pointed at
    `minilm_server`; keyword arguments go to `OpenAIEmbedder` (`embedder__...`) or `open`."""
    opened: list[Memory | AsyncMemory] = []
    clients: list[OpenAIEmbedder | OpenAISynthesizer] = []

    async def open_(**kwargs: Any) -> Either:
        settings = {k.removeprefix("embedder__"): v for k, v in kwargs.items() if k.startswith("embedder__")}
        rest = {k: v for k, v in kwargs.items() if not k.startswith("embedder__")}
        chosen = OpenAIEmbedder(MINILM, base_url=minilm_server.base_url, **settings)
        clients.append(chosen)
        if isinstance(rest.get("synthesizer"), OpenAISynthesizer):
            clients.append(rest["synthesizer"])
        if request.param == "sync":
            memory: Memory | AsyncMemory = Memory.open(pg_dsn, chosen, schema=openai_schema, **rest)
        else:
            memory = await AsyncMemory.open(pg_dsn, chosen, schema=openai_schema, **rest)
        opened.append(memory)
        probes = [r.inputs for r in minilm_server.requests()]
        assert len(probes) == 1 and len(probes[0]) == 1, "open probes the unknown model's dimension once"
        minilm_server.reset()
        return Either(memory)

    yield open_
    for memory in opened:
        if isinstance(memory, AsyncMemory):
            await memory.close()
        else:
            memory.close()
    for client in clients:
        await client.aclose()


async def embed_documents(embedder: OpenAIEmbedder, texts: list[str], use_async: bool) -> list[list[float]]:
    return await embedder.aembed_documents(texts) if use_async else embedder.embed_documents(texts)


async def embed_query(embedder: OpenAIEmbedder, text: str, use_async: bool) -> list[float]:
    return await embedder.aembed_query(text) if use_async else embedder.embed_query(text)


both = pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])


# --- the embedder against the server ------------------------------------------------------------------


@both
async def test_batches_keep_input_order_even_when_the_server_shuffles(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool
) -> None:
    server.shuffle = True
    embedder = make_embedder("fake-hash", base_url=server.base_url, batch_size=3)
    texts = [f"text number {i} about topic {i % 3}" for i in range(7)]
    vectors = await embed_documents(embedder, texts, use_async)
    assert [r.inputs for r in server.requests()] == [texts[0:3], texts[3:6], texts[6:7]]
    np.testing.assert_allclose(vectors, hashing_embedding(texts, DEFAULT_DIMENSIONS), rtol=1e-6)


@both
async def test_an_empty_list_makes_no_request(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool
) -> None:
    embedder = make_embedder("fake-hash", base_url=server.base_url, dimensions=8)
    assert await embed_documents(embedder, [], use_async) == []
    assert server.requests() == []


@both
async def test_dimensions_are_sent_only_when_given(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool
) -> None:
    shortened = make_embedder("text-embedding-3-small", base_url=server.base_url, dimensions=256)
    assert shortened.dimensions == 256
    assert len(await embed_query(shortened, "hello", use_async)) == 256
    full = make_embedder("text-embedding-3-small", base_url=server.base_url)
    assert len(await embed_query(full, "hello", use_async)) == 1536
    quiet = make_embedder("fake-hash", base_url=server.base_url, dimensions=DEFAULT_DIMENSIONS, send_dimensions=False)
    assert len(await embed_query(quiet, "hello", use_async)) == DEFAULT_DIMENSIONS
    first, second, third = (r.body for r in server.requests("embeddings"))
    assert first["dimensions"] == 256
    assert "dimensions" not in second
    assert "dimensions" not in third


@both
async def test_request_carries_model_key_and_float_encoding(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool
) -> None:
    embedder = make_embedder("fake-hash", base_url=server.base_url, api_key="sk-test-123", dimensions=16)
    await embed_documents(embedder, ["one", "two"], use_async)
    (recorded,) = server.requests()
    assert recorded.path == "/v1/embeddings"
    assert recorded.headers["authorization"] == "Bearer sk-test-123"
    assert recorded.body["model"] == "fake-hash"
    assert recorded.body["input"] == ["one", "two"]
    assert recorded.body["encoding_format"] == "float"


def test_a_base_url_needs_no_api_key(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    embedder = make_embedder("fake-hash", base_url=server.base_url, dimensions=16)
    embedder.embed_query("hello")
    assert server.requests()[0].headers["authorization"] == "Bearer not-needed"


def test_known_models_need_no_request(server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder]) -> None:
    for model, size in KNOWN_DIMENSIONS.items():
        assert make_embedder(model, base_url=server.base_url).dimensions == size
    assert server.requests() == []


def test_an_unknown_model_is_probed_once(server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder]) -> None:
    embedder = make_embedder("fake-hash", base_url=server.base_url)
    assert embedder.dimensions == DEFAULT_DIMENSIONS
    assert embedder.dimensions == DEFAULT_DIMENSIONS
    (probe,) = server.requests()
    assert len(probe.inputs) == 1
    assert "dimensions" not in probe.body


def test_a_failing_probe_raises_embedding_error(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder]
) -> None:
    server.fail(500, times=5)
    embedder = make_embedder("fake-hash", base_url=server.base_url, max_retries=0)
    with pytest.raises(EmbeddingError, match="500"):
        _ = embedder.dimensions


@both
@pytest.mark.parametrize("status", [500, 503, 429])
async def test_retries_recover_from_server_errors(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool, status: int
) -> None:
    embedder = make_embedder("fake-hash", base_url=server.base_url, dimensions=16, max_retries=2)
    server.fail(status, times=2)
    vector = await embed_query(embedder, "hello", use_async)
    np.testing.assert_allclose(vector, hashing_embedding(["hello"], 16)[0], rtol=1e-6)
    assert len(server.requests()) == 3


@both
async def test_exhausted_retries_raise_embedding_error(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool
) -> None:
    embedder = make_embedder("fake-hash", base_url=server.base_url, dimensions=16, max_retries=1)
    server.fail(500, times=3)
    with pytest.raises(EmbeddingError, match=r"fake-hash.*500"):
        await embed_query(embedder, "hello", use_async)
    assert len(server.requests()) == 2


@both
async def test_a_client_error_is_not_retried(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool
) -> None:
    embedder = make_embedder("fake-hash", base_url=server.base_url, dimensions=16, max_retries=3)
    server.fail(400)
    with pytest.raises(EmbeddingError, match="400"):
        await embed_query(embedder, "hello", use_async)
    assert len(server.requests()) == 1


@both
async def test_a_slow_server_raises_embedding_error_after_the_timeout(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool
) -> None:
    embedder = make_embedder("fake-hash", base_url=server.base_url, dimensions=16, timeout=0.3, max_retries=0)
    server.slow(10)
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match="timed out"):
        await embed_query(embedder, "hello", use_async)
    assert time.monotonic() - started < 5, "the client waited for the server instead of timing out"


MALFORMED = {
    "not-json": Fault(body=b"<html>502 Bad Gateway</html>"),
    "empty-object": Fault(body=b"{}"),
    "data-null": Fault(body=b'{"object": "list", "data": null}'),
    "a-list": Fault(body=b"[1, 2, 3]"),
    "string-embedding": Fault(
        body=b'{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": "abc"}]}'
    ),
    "null-embedding": Fault(
        body=b'{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": null}]}'
    ),
    "bad-index": Fault(body=b'{"object": "list", "data": [{"object": "embedding", "index": 5, "embedding": [1.0]}]}'),
    "missing-item": Fault(drop=1),
}


@both
@pytest.mark.parametrize("fault", MALFORMED.values(), ids=MALFORMED.keys())
async def test_malformed_responses_raise_embedding_error(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool, fault: Fault
) -> None:
    embedder = make_embedder("fake-hash", base_url=server.base_url, dimensions=16, max_retries=0)
    server.push(fault)
    with pytest.raises(EmbeddingError):
        await embed_documents(embedder, ["hello"], use_async)


@both
async def test_wrong_dimension_and_nan_are_caught_by_check_vectors(
    server: FakeOpenAI, make_embedder: Callable[..., OpenAIEmbedder], use_async: bool
) -> None:
    embedder = make_embedder("fake-hash", base_url=server.base_url)
    dims = embedder.dimensions
    server.push(Fault(dimensions=dims - 1))
    short = await embed_documents(embedder, ["a", "b"], use_async)
    with pytest.raises(EmbeddingError, match=f"dimension {dims - 1}, expected {dims}"):
        check_vectors(short, count=2, dimensions=dims)
    server.push(Fault(nan=True))
    nan = await embed_documents(embedder, ["a"], use_async)
    assert math.isnan(nan[0][0])
    with pytest.raises(EmbeddingError, match="NaN"):
        check_vectors(nan, count=1, dimensions=dims)


def test_bad_settings_raise_configuration_error(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="batch_size"):
        OpenAIEmbedder("m", base_url=server.base_url, batch_size=0)
    with pytest.raises(ConfigurationError, match="dimensions"):
        OpenAIEmbedder("m", base_url=server.base_url, dimensions=0)
    with pytest.raises(ConfigurationError, match="timeout"):
        OpenAIEmbedder("m", base_url=server.base_url, timeout=0)
    with pytest.raises(ConfigurationError, match="max_retries"):
        OpenAIEmbedder("m", base_url=server.base_url, max_retries=-1)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIEmbedder("m")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAISynthesizer("m")


# --- default_embedder ----------------------------------------------------------------------------------


def test_default_embedder_is_local_without_openai_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMSODA_OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(default_embedder(), LocalEmbedder)


async def test_default_embedder_is_openai_with_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("MEMSODA_OPENAI_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chosen = default_embedder()
    assert isinstance(chosen, OpenAIEmbedder)
    assert (chosen.model, chosen.dimensions) == ("text-embedding-3-small", 1536)
    await chosen.aclose()


async def test_default_embedder_is_openai_with_a_base_url(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("MEMSODA_OPENAI_MODEL", "fake-hash")
    chosen = default_embedder()
    assert isinstance(chosen, OpenAIEmbedder)
    assert chosen.model == "fake-hash"
    assert len(chosen.embed_query("hello")) == DEFAULT_DIMENSIONS
    assert [r.body["model"] for r in server.requests()] == ["fake-hash"]
    await chosen.aclose()


# --- end to end: Memory and AsyncMemory through the OpenAI protocol ---------------------------------------


async def test_write_and_recall_through_the_server(
    open_memory: OpenMemory, minilm_server: FakeOpenAI, scope: ScopeArgs
) -> None:
    memory = await open_memory(embedder__batch_size=3)
    ids = await memory.add_facts(FACTS, **scope)
    assert len(ids) == len(FACTS)
    writes = minilm_server.requests("embeddings")
    assert len(writes) > 1
    assert all(1 <= len(r.inputs) <= 3 for r in writes)
    assert all(r.body["model"] == MINILM for r in writes)
    minilm_server.reset()

    result = await memory.recall("What drink does Alice like?", **scope)
    assert not result.degraded
    assert result.facts[0].fact.object == "green tea"
    assert "vector" in result.facts[0].ranks
    assert "green tea" in result.context
    (query,) = minilm_server.requests("embeddings")
    assert query.inputs == ["What drink does Alice like?"]
    (stats,) = await memory.stats(**scope)
    assert stats["facts"] == len(FACTS)


FAILED_WRITES = {
    "http-500": Fault(status=500),
    "wrong-dimension": Fault(dimensions=100),
    "nan": Fault(nan=True),
    "garbage": Fault(body=b"not json at all"),
}


@pytest.mark.parametrize("fault", FAILED_WRITES.values(), ids=FAILED_WRITES.keys())
async def test_a_failed_embedding_writes_nothing(
    open_memory: OpenMemory, minilm_server: FakeOpenAI, scope: ScopeArgs, fault: Fault
) -> None:
    memory = await open_memory(embedder__max_retries=0)
    minilm_server.push(fault, times=3)
    with pytest.raises(EmbeddingError):
        await memory.add_facts(FACTS, **scope)
    assert await memory.stats(**scope) in ([], [{**scope, "facts": 0, "live_facts": 0, "entities": 0, "episodes": 0}])
    minilm_server.reset()
    result = await memory.recall("Alice", **scope)
    assert result.facts == ()
    assert result.context == ""


@pytest.mark.parametrize("how", ["http-500", "garbage", "wrong-dimension"])
async def test_recall_degrades_when_the_server_fails(
    open_memory: OpenMemory, minilm_server: FakeOpenAI, scope: ScopeArgs, how: str
) -> None:
    memory = await open_memory(embedder__max_retries=0)
    await memory.add_facts(FACTS, **scope)
    fault = {"http-500": Fault(status=500), "garbage": Fault(body=b"{"), "wrong-dimension": Fault(dimensions=7)}[how]
    minilm_server.push(fault)
    result = await memory.recall("What does Alice drink?", **scope)
    assert result.degraded
    assert result.degraded_reason is not None and "embedding failed" in result.degraded_reason
    found = {scored.fact.object.lower() for scored in result.facts}
    assert {"green tea", "acme"} <= found, "the named anchor Alice still finds her facts"
    assert all("vector" not in scored.ranks for scored in result.facts)
    assert "anchor" in result.facts[0].ranks

    minilm_server.push(fault)
    keyword = await memory.recall("who plays cello", **scope)
    assert keyword.degraded
    assert keyword.facts[0].fact.object == "the cello"
    assert "keyword" in keyword.facts[0].ranks

    healthy = await memory.recall("What does Alice drink?", **scope)
    assert not healthy.degraded, "a failure is not cached: the next recall embeds again"


@pytest.mark.parametrize("where", ["open", "recall"])
async def test_recall_degrades_when_the_server_is_too_slow(
    open_memory: OpenMemory, minilm_server: FakeOpenAI, scope: ScopeArgs, where: str
) -> None:
    fast = RecallOptions(embed_timeout_s=0.3)
    memory = await open_memory(options=fast) if where == "open" else await open_memory()
    await memory.add_facts(FACTS, **scope)
    minilm_server.slow(10)
    started = time.monotonic()
    if where == "open":
        result = await memory.recall("Where does Bob live?", **scope)
    else:
        result = await memory.recall("Where does Bob live?", **scope, options=fast)
    assert time.monotonic() - started < 5, "recall waited for the slow embedder"
    assert result.degraded
    assert result.degraded_reason is not None and "timed out" in result.degraded_reason
    assert "paris" in {scored.fact.object.lower() for scored in result.facts}


# --- synthesis ---------------------------------------------------------------------------------------------


async def test_synthesis_makes_one_chat_request_with_the_context(
    open_memory: OpenMemory, minilm_server: FakeOpenAI, scope: ScopeArgs
) -> None:
    synthesizer = OpenAISynthesizer("fake-chat", base_url=minilm_server.base_url, api_key="sk-chat")
    memory = await open_memory(synthesizer=synthesizer)
    await memory.add_facts(FACTS, **scope)
    result = await memory.recall("What does Alice drink?", **scope, include=["synthesis"])
    assert result.synthesis == minilm_server.chat_content
    assert result.errors == {}
    assert "synthesis" in result.timings_ms
    (chat,) = minilm_server.requests("chat")
    assert chat.path == "/v1/chat/completions"
    assert chat.body["model"] == "fake-chat"
    assert chat.headers["authorization"] == "Bearer sk-chat"
    (message,) = chat.messages
    assert message["role"] == "user"
    assert result.context in message["content"]
    assert "What does Alice drink?" in message["content"]


@pytest.mark.parametrize("fault", [Fault(status=500), Fault(body=b"garbage"), Fault(body=b'{"choices": []}')])
async def test_a_failing_chat_model_keeps_the_recall(
    open_memory: OpenMemory, minilm_server: FakeOpenAI, scope: ScopeArgs, fault: Fault
) -> None:
    synthesizer = OpenAISynthesizer("fake-chat", base_url=minilm_server.base_url, max_retries=0)
    memory = await open_memory(synthesizer=synthesizer)
    await memory.add_facts(FACTS, **scope)
    plain = await memory.recall("What does Alice drink?", **scope)
    minilm_server.push(fault, endpoint="chat")
    result = await memory.recall("What does Alice drink?", **scope, include=["synthesis"])
    assert result.synthesis is None
    assert set(result.errors) == {"synthesis"}
    assert result.errors["synthesis"]
    assert result.context == plain.context
    assert [s.fact.id for s in result.facts] == [s.fact.id for s in plain.facts]
    assert len(minilm_server.requests("chat")) == 1


async def test_synthesis_is_skipped_when_nothing_matched(
    open_memory: OpenMemory, minilm_server: FakeOpenAI, scope: ScopeArgs
) -> None:
    synthesizer = OpenAISynthesizer("fake-chat", base_url=minilm_server.base_url)
    memory = await open_memory(synthesizer=synthesizer)
    result = await memory.recall("anything at all", **scope, include=["synthesis"])
    assert result.context == ""
    assert result.synthesis is None
    assert minilm_server.requests("chat") == []


async def test_synthesis_without_a_synthesizer_is_a_configuration_error(
    open_memory: OpenMemory, scope: ScopeArgs
) -> None:
    memory = await open_memory()
    with pytest.raises(ConfigurationError, match="synthesizer"):
        await memory.recall("Alice", **scope, include=["synthesis"])


class EchoSynthesizer:
    """Only the sync method: AsyncMemory must still be able to use it."""

    def synthesize(self, context: str, query: str | None) -> str:
        return f"{query}: {len(context.splitlines())} lines"


async def test_a_sync_only_synthesizer_works_for_both(open_memory: OpenMemory, scope: ScopeArgs) -> None:
    memory = await open_memory(synthesizer=EchoSynthesizer())
    await memory.add_facts(FACTS, **scope)
    result = await memory.recall("Alice", **scope, include=["synthesis"])
    assert result.errors == {}
    assert result.synthesis is not None and result.synthesis.startswith("Alice: ")
