"""The LangChain adapter against a real store: the standard retriever suite, both modes, per-call
arguments, async, callbacks, and the embedder wrapper."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import create_retriever_tool
from langchain_tests.integration_tests import RetrieversIntegrationTests

from memsoda_core import (
    ArgumentTypeError,
    AsyncMemory,
    ConfigurationError,
    LimitError,
    LocalEmbedder,
    Memory,
    MemsodaError,
    ScopeArgs,
    ScopeError,
    ValidationError,
)
from memsoda_core.limits import MAX_K, MAX_QUERY_CHARS
from memsoda_langchain import LangChainEmbedder, MemsodaContextMiddleware, MemsodaRetriever, memory_tools
from tests.conftest import Either
from tests.helpers import ADAPTER_FACTS as FACTS
from tests.helpers import ADAPTER_QUERY as QUERY
from tests.helpers import CountingEmbedder


class LocalLangChainEmbeddings(Embeddings):
    """A LangChain Embeddings backed by the offline model (to test LangChainEmbedder end to end)."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


class Recorder(BaseCallbackHandler):
    """Records retriever runs."""

    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []
        self.ends: list[list[Document]] = []

    def on_retriever_start(self, serialized: dict[str, Any], query: str, **kwargs: Any) -> None:
        self.starts.append({"query": query, **kwargs})

    def on_retriever_end(self, documents: Any, **kwargs: Any) -> None:
        self.ends.append(list(documents))


async def seed(memory: Either, scope: ScopeArgs) -> list[int]:
    ids: list[int] = await memory.add_facts(FACTS, **scope)
    return ids


def retriever_for(memory: Either, scope: ScopeArgs, **kwargs: Any) -> MemsodaRetriever:
    raw = memory.raw if hasattr(memory, "raw") else memory
    return MemsodaRetriever(memory=raw, **scope, **kwargs)


async def ask(retriever: MemsodaRetriever, query: str, **kwargs: Any) -> list[Document]:
    """`ainvoke` always; `invoke` too when the memory is sync (and both must agree)."""
    docs = await retriever.ainvoke(query, **kwargs)
    if isinstance(retriever.memory, Memory):
        assert retriever.invoke(query, **kwargs) == docs
    return docs


class TestStandardRetriever(RetrieversIntegrationTests):
    """LangChain's own retriever suite, in "facts" mode (one Document per fact)."""

    @pytest.fixture(autouse=True)
    def _store(self, sync_memory: Memory, scope: ScopeArgs) -> Iterator[None]:
        sync_memory.add_facts(FACTS, **scope)
        self._params: dict[str, Any] = {"memory": sync_memory, **scope, "mode": "facts"}
        yield

    @property
    def retriever_constructor(self) -> type[MemsodaRetriever]:
        return MemsodaRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return self._params

    @property
    def retriever_query_example(self) -> str:
        return QUERY


async def test_context_mode(memory: Either, scope: ScopeArgs) -> None:
    await seed(memory, scope)
    expected = await memory.recall(QUERY, **scope)
    docs = await ask(retriever_for(memory, scope), QUERY)
    assert len(docs) == 1
    (doc,) = docs
    assert doc.page_content == expected.context
    assert "user drives honda civic" in doc.page_content
    assert doc.id is not None and doc.id.startswith("memsoda-context-")
    assert doc.metadata["facts"] == [fact.to_dict() for fact in expected.facts]
    assert doc.metadata["entities"] == [{"name": e.name, "type": e.type} for e in expected.entities]
    assert doc.metadata["degraded"] is False
    assert "episodes" not in doc.metadata
    json.dumps(doc.metadata)


async def test_facts_mode(memory: Either, scope: ScopeArgs) -> None:
    await seed(memory, scope)
    expected = await memory.recall(QUERY, **scope, facts_in_context=4)
    docs = await ask(retriever_for(memory, scope, mode="facts", k=4), QUERY)
    assert [doc.id for doc in docs] == [f"memsoda-fact-{s.fact.id}" for s in expected.facts]
    assert [doc.page_content for doc in docs] == [s.fact.text for s in expected.facts]
    assert [doc.metadata for doc in docs] == [s.to_dict() for s in expected.facts]
    assert docs[0].page_content == "user drives honda civic"
    assert docs[0].metadata["score"] >= docs[-1].metadata["score"]
    json.dumps([doc.metadata for doc in docs])


async def test_k_in_constructor_and_per_call(memory: Either, scope: ScopeArgs) -> None:
    await seed(memory, scope)
    facts = retriever_for(memory, scope, mode="facts", k=5)
    assert len(await ask(facts, QUERY)) == 5
    assert len(await ask(facts, QUERY, k=2)) == 2
    context = retriever_for(memory, scope, k=1)
    (doc,) = await ask(context, QUERY)
    assert len(doc.metadata["facts"]) == 1
    (wider,) = await ask(context, QUERY, k=6)
    assert len(wider.metadata["facts"]) == 6


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_query_embedding_skips_the_embedder(
    kind: str, pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    counting = CountingEmbedder(embedder)
    query = f"which car does the user own {uuid.uuid4().hex[:6]}?"  # not in any query cache
    vector = embedder.embed_query(query)
    if kind == "sync":
        sync_memory = Memory.open(pg_dsn, counting)
        try:
            sync_memory.add_facts(FACTS, **scope)
            retriever = MemsodaRetriever(memory=sync_memory, **scope, mode="facts", k=3)
            given = retriever.invoke(query, query_embedding=vector)
            given_async = await retriever.ainvoke(query, query_embedding=vector)
            assert counting.query_calls == 0
            embedded = retriever.invoke(query)
        finally:
            sync_memory.close()
    else:
        async_memory = await AsyncMemory.open(pg_dsn, counting)
        try:
            await async_memory.add_facts(FACTS, **scope)
            retriever = MemsodaRetriever(memory=async_memory, **scope, mode="facts", k=3)
            given = await retriever.ainvoke(query, query_embedding=vector)
            given_async = given
            assert counting.query_calls == 0
            embedded = await retriever.ainvoke(query)
        finally:
            await async_memory.close()
    assert counting.query_calls == 1
    assert [d.id for d in given] == [d.id for d in embedded] == [d.id for d in given_async]
    assert given[0].page_content == "user drives honda civic"


async def test_a_query_over_the_limit_is_recalled_by_its_head(memory: Either, scope: ScopeArgs) -> None:
    await seed(memory, scope)
    pasted = QUERY + " Some notes I pasted. " * 250  # a chain passes the user's message on
    assert len(pasted) > MAX_QUERY_CHARS
    (doc,) = await ask(retriever_for(memory, scope, k=3), pasted)
    assert "user drives honda civic" in doc.page_content


async def test_empty_result(memory: Either, scope: ScopeArgs) -> None:
    assert await ask(retriever_for(memory, scope), QUERY) == []
    assert await ask(retriever_for(memory, scope, mode="facts"), QUERY) == []


async def test_include_episodes_and_as_of(memory: Either, scope: ScopeArgs) -> None:
    (old,) = await memory.add_facts(
        [
            {
                "subject": "user",
                "predicate": "drives",
                "object": "vw golf",
                "object_type": "PRODUCT",
                "valid_at": "2020-01-01",
            }
        ],
        **scope,
    )
    await memory.invalidate(old, **scope, at="2021-01-01")
    await memory.add_episodes([{"text": "The user talked about buying a new car.", "thread_id": "t1"}], **scope)
    retriever = retriever_for(memory, scope, mode="facts")
    assert [d.id for d in await ask(retriever, QUERY, as_of="2020-06-01")] == [f"memsoda-fact-{old}"]
    assert await ask(retriever, QUERY) == []

    context = retriever_for(memory, scope, include=("episodes",))
    (doc,) = await ask(context, QUERY)
    assert "# EPISODES" in doc.page_content
    assert doc.metadata["facts"] == []
    assert doc.metadata["episodes"][0]["text"] == "The user talked about buying a new car."
    (per_call,) = await ask(retriever_for(memory, scope), QUERY, include=["episodes"], as_of="2020-06-01")
    assert "vw golf" in per_call.page_content and "episodes" in per_call.metadata
    json.dumps(per_call.metadata)


async def test_async_memory_needs_ainvoke(pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs) -> None:
    async with await AsyncMemory.open(pg_dsn, embedder) as async_memory:
        retriever = MemsodaRetriever(memory=async_memory, **scope)
        with pytest.raises(ConfigurationError, match="ainvoke"):
            retriever.invoke(QUERY)


async def test_callbacks_see_the_run(memory: Either, scope: ScopeArgs) -> None:
    await seed(memory, scope)
    recorder = Recorder()
    retriever = retriever_for(memory, scope, tags=["memsoda"], metadata={"user": "u1"})
    config: Any = {"callbacks": [recorder], "tags": ["call"], "metadata": {"request": 7}}
    docs = await retriever.ainvoke(QUERY, config=config, k=2)
    (start,) = recorder.starts
    assert start["query"] == QUERY
    assert set(start["tags"]) >= {"memsoda", "call"}
    assert start["metadata"]["user"] == "u1" and start["metadata"]["request"] == 7
    assert start["name"] == "MemsodaRetriever"
    assert recorder.ends == [docs]


BAD_ARGUMENTS: list[tuple[dict[str, Any], type[MemsodaError]]] = [
    ({"k": 0}, LimitError),
    ({"k": -3}, LimitError),
    ({"k": MAX_K + 1}, LimitError),
    ({"k": "3"}, ArgumentTypeError),
    ({"k": 2.0}, ArgumentTypeError),
    ({"k": True}, ArgumentTypeError),
    ({"mode": "chunks"}, ConfigurationError),
    ({"include": [5]}, ArgumentTypeError),
    ({"include": ["nothing"]}, ValidationError),
    ({"memory": object()}, ConfigurationError),
    ({"project": 5}, ScopeError),
    ({"dataset": ["a"]}, ScopeError),
    ({"tags": 5}, ArgumentTypeError),  # a LangChain field: pydantic's refusal, as memsoda's type
]


@pytest.mark.parametrize(("bad", "error"), BAD_ARGUMENTS, ids=lambda v: repr(v) if isinstance(v, dict) else "")
def test_bad_arguments_raise_memsodas_errors_not_pydantics(
    sync_memory: Memory, scope: ScopeArgs, bad: dict[str, Any], error: type[MemsodaError]
) -> None:
    """Every bad constructor argument is a documented memsoda error (the tools, the middleware and
    the LlamaIndex adapters raise the same), never pydantic's ValidationError."""
    with pytest.raises(error) as raised:
        MemsodaRetriever(**{"memory": sync_memory, **scope, **bad})
    assert not isinstance(raised.value, pydantic.ValidationError)
    if "k" in bad:
        with pytest.raises(error):
            MemsodaContextMiddleware(memory=sync_memory, **scope, k=bad["k"])
        with pytest.raises(error):
            memory_tools(sync_memory, **scope, k=bad["k"])
    assert MemsodaRetriever(memory=sync_memory, **scope, include="episodes").include == ("episodes",)


def test_the_middleware_checks_its_profile_size_when_built(sync_memory: Memory, scope: ScopeArgs) -> None:
    with pytest.raises(LimitError):
        MemsodaContextMiddleware(memory=sync_memory, **scope, max_facts=0)
    with pytest.raises(ArgumentTypeError):
        MemsodaContextMiddleware(memory=sync_memory, **scope, max_facts="5")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        MemsodaContextMiddleware(memory=object(), **scope)  # type: ignore[arg-type]


def test_retriever_tool(sync_memory: Memory, scope: ScopeArgs) -> None:
    sync_memory.add_facts(FACTS, **scope)
    tool = create_retriever_tool(
        MemsodaRetriever(memory=sync_memory, **scope, k=3), "recall_memory", "Facts known about the user."
    )
    output = tool.invoke({"query": QUERY})
    assert output.startswith("Known facts about the user")
    assert "user drives honda civic" in output


def test_langchain_embedder_round_trip(pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs) -> None:
    wrapped = LangChainEmbedder(LocalLangChainEmbeddings(embedder), model=embedder.model)
    assert wrapped.dimensions == 384  # measured by one embedding
    with Memory.open(pg_dsn, wrapped) as through_langchain:
        through_langchain.add_facts(FACTS, **scope)
        docs = MemsodaRetriever(memory=through_langchain, **scope, mode="facts", k=1).invoke(QUERY)
    assert docs[0].page_content == "user drives honda civic"


async def test_langchain_embedder_protocol() -> None:
    fake = DeterministicFakeEmbedding(size=16)
    with pytest.raises(ConfigurationError, match="model="):
        LangChainEmbedder(fake)
    wrapped = LangChainEmbedder(fake, model="fake-16")
    assert (wrapped.model, wrapped.dimensions) == ("fake-16", 16)
    assert LangChainEmbedder(fake, model="fake", dimensions=16).dimensions == 16
    assert wrapped.embed_query("a") == fake.embed_query("a") == await wrapped.aembed_query("a")
    assert wrapped.embed_documents(["a", "b"]) == await wrapped.aembed_documents(["a", "b"])


async def test_known_at_per_call(memory: Either, scope: ScopeArgs) -> None:
    (old,) = await memory.add_facts(
        [{"subject": "user", "predicate": "lives in", "object": "amsterdam", "valid_at": "2020-01-01"}], **scope
    )
    learned = (await memory.get_fact(old, **scope)).created_at
    await memory.supersede(old, {"subject": "user", "predicate": "lives in", "object": "utrecht"}, **scope)
    retriever = retriever_for(memory, scope, mode="facts", k=1)
    then = await ask(retriever, "where does the user live?", known_at=learned)
    now = await ask(retriever, "where does the user live?")
    assert [d.page_content for d in then] == ["user lives in amsterdam"]
    assert [d.page_content for d in now] == ["user lives in utrecht"]


async def test_one_retriever_serves_many_users_by_the_run_config(memory: Either) -> None:
    """`dataset_from="user_id"`: each run's `config["configurable"]["user_id"]` is its dataset, on
    a direct call, in an LCEL chain, in a batch and through a retriever tool inside a run."""
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    await memory.add_facts(FACTS, dataset=alice, project="app")
    bobs = [{"subject": "user", "predicate": "drives", "object": "tesla model 3", "object_type": "PRODUCT"}]
    await memory.add_facts(bobs, dataset=bob, project="app")
    retriever = MemsodaRetriever(memory=memory.raw, dataset_from="user_id", project="app")
    of: dict[str, RunnableConfig] = {user: {"configurable": {"user_id": user}} for user in (alice, bob)}

    def text(docs: list[Document]) -> str:
        return " ".join(doc.page_content for doc in docs)

    for user, mine, theirs in ((alice, "honda civic", "tesla"), (bob, "tesla model 3", "honda")):
        seen = text(await retriever.ainvoke(QUERY, of[user]))
        assert mine in seen and theirs not in seen
        if not memory.is_async:
            assert text(retriever.invoke(QUERY, of[user])) == seen
    chain = retriever | RunnableLambda(text)
    assert "tesla" in await chain.ainvoke(QUERY, of[bob])
    batched = await retriever.abatch([QUERY, QUERY], [of[alice], of[bob]])
    assert "honda" in text(batched[0]) and "tesla" in text(batched[1]) and "tesla" not in text(batched[0])
    tool = create_retriever_tool(retriever, "recall_memory", "Facts known about the user.")
    assert "honda civic" in await tool.ainvoke({"query": QUERY}, of[alice])  # the tool's run passes its config on
    with pytest.raises(ScopeError, match="user_id"):
        await retriever.ainvoke(QUERY)
    with pytest.raises(ScopeError, match="user_id"):
        await retriever.ainvoke(QUERY, {"configurable": {"langgraph_user_id": alice}})


def test_the_scope_rule_is_checked_when_the_retriever_is_built(sync_memory: Memory, scope: ScopeArgs) -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        MemsodaRetriever(memory=sync_memory, **scope, dataset_from="user_id")
    with pytest.raises(ScopeError, match="dataset is required"):
        MemsodaRetriever(memory=sync_memory, project="p")
    with pytest.raises(ScopeError, match="project"):
        MemsodaRetriever(memory=sync_memory, dataset="a", project="")
    with pytest.raises(ScopeError, match="project"):
        MemsodaRetriever(memory=sync_memory, dataset="a")
    fixed = MemsodaRetriever(memory=sync_memory, **scope)
    sync_memory.add_facts(FACTS, **scope)
    assert fixed.invoke(QUERY, {"configurable": {"user_id": "someone else"}})  # the fixed form ignores it
