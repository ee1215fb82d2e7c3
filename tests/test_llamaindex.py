"""The LlamaIndex adapter against a real store: retriever (sync, async, precomputed embedding,
empty result, modes, k), query and chat engines, the memory block, and the embedder wrapper."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import ReActAgent
from llama_index.core.async_utils import asyncio_run
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatResponse
from llama_index.core.bridge.pydantic import Field
from llama_index.core.bridge.pydantic import ValidationError as PydanticValidationError
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import ChatMessage, MockLLM, TextBlock
from llama_index.core.memory import BaseMemoryBlock, InsertMethod, StaticMemoryBlock
from llama_index.core.memory import Memory as ChatMemory
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

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
from memsoda_core.limits import MAX_QUERY_CHARS
from memsoda_llamaindex import LlamaIndexEmbedder, MemsodaMemoryBlock, MemsodaRetriever
from tests.conftest import Either
from tests.helpers import ADAPTER_FACTS as FACTS
from tests.helpers import ADAPTER_QUERY as QUERY
from tests.helpers import CountingEmbedder
from tests.scripted_extractor import ScriptedExtractor, add, answer


class LocalLlamaEmbedding(BaseEmbedding):
    """A LlamaIndex BaseEmbedding backed by the offline model (to test LlamaIndexEmbedder)."""

    inner: Any = None

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.inner.embed_query(query)  # type: ignore[no-any-return]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.inner.embed_query(text)  # type: ignore[no-any-return]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


ChatMemoryFactory = Callable[..., ChatMemory]


def chat_memories(engines: list[AsyncEngine]) -> ChatMemoryFactory:
    """LlamaIndex Memories on in-memory SQLite engines we dispose of (the default one is never
    closed, and aiosqlite warns when it is collected)."""

    def make(**kwargs: Any) -> ChatMemory:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        engines.append(engine)
        return ChatMemory.from_defaults(async_engine=engine, **kwargs)

    return make


@pytest.fixture
async def chat_memory() -> AsyncIterator[ChatMemoryFactory]:
    engines: list[AsyncEngine] = []
    yield chat_memories(engines)
    for engine in engines:
        await engine.dispose()


@pytest.fixture
def sync_chat_memory() -> Iterator[ChatMemoryFactory]:
    engines: list[AsyncEngine] = []
    yield chat_memories(engines)
    for engine in engines:
        asyncio_run(engine.dispose())


def retriever_for(memory: Either | Memory | AsyncMemory, scope: ScopeArgs, **kwargs: Any) -> MemsodaRetriever:
    raw = memory.raw if hasattr(memory, "raw") else memory
    return MemsodaRetriever(memory=raw, **scope, **kwargs)


async def ask(retriever: MemsodaRetriever, query: str | QueryBundle) -> list[NodeWithScore]:
    """`aretrieve` always; `retrieve` too when the memory is sync (and both must agree)."""
    nodes = await retriever.aretrieve(query)
    if isinstance(retriever.memory, Memory):
        assert retriever.retrieve(query) == nodes
    return nodes


async def test_context_mode(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(FACTS, **scope)
    expected = await memory.recall(QUERY, **scope)
    (hit,) = await ask(retriever_for(memory, scope), QUERY)
    assert hit.node.get_content() == expected.context
    assert hit.node.get_content(metadata_mode=MetadataMode.LLM) == expected.context  # no metadata dump
    assert hit.node.get_content(metadata_mode=MetadataMode.EMBED) == expected.context
    assert hit.node.node_id.startswith("memsoda-context-")
    assert hit.score is None
    assert hit.node.metadata["facts"] == [fact.to_dict() for fact in expected.facts]
    assert hit.node.metadata["entities"] == [{"name": e.name, "type": e.type} for e in expected.entities]
    assert "episodes" not in hit.node.metadata
    json.dumps(hit.node.metadata)


async def test_facts_mode(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(FACTS, **scope)
    expected = await memory.recall(QUERY, **scope, facts_in_context=4)
    nodes = await ask(retriever_for(memory, scope, mode="facts", k=4), QUERY)
    assert [n.node.node_id for n in nodes] == [f"memsoda-fact-{s.fact.id}" for s in expected.facts]
    assert [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes] == [s.fact.text for s in expected.facts]
    assert [n.node.metadata for n in nodes] == [s.to_dict() for s in expected.facts]
    assert [n.score for n in nodes] == [s.score for s in expected.facts]
    assert nodes[0].node.get_content() == "user drives honda civic"
    json.dumps([n.node.metadata for n in nodes])


async def test_k(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(FACTS, **scope)
    assert len(await ask(retriever_for(memory, scope, mode="facts", k=1), QUERY)) == 1
    assert len(await ask(retriever_for(memory, scope, mode="facts", k=5), QUERY)) == 5
    (hit,) = await ask(retriever_for(memory, scope, k=2), QUERY)
    assert len(hit.node.metadata["facts"]) == 2


async def test_empty_result(memory: Either, scope: ScopeArgs) -> None:
    assert await ask(retriever_for(memory, scope), QUERY) == []
    assert await ask(retriever_for(memory, scope, mode="facts"), QUERY) == []


async def test_episodes(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_episodes([{"text": "The user talked about buying a new car.", "thread_id": "t1"}], **scope)
    (hit,) = await ask(retriever_for(memory, scope, include=["episodes"]), QUERY)
    assert "# EPISODES" in hit.node.get_content()
    assert hit.node.metadata["episodes"][0]["thread_id"] == "t1"


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_query_bundle_embedding_skips_the_embedder(
    kind: str, pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    counting = CountingEmbedder(embedder)
    query = f"which car does the user own {uuid.uuid4().hex[:6]}?"  # not in any query cache
    bundle = QueryBundle(query_str=query, embedding=embedder.embed_query(query))
    if kind == "sync":
        sync_memory = Memory.open(pg_dsn, counting)
        try:
            sync_memory.add_facts(FACTS, **scope)
            retriever = MemsodaRetriever(memory=sync_memory, **scope, mode="facts", k=3)
            given = retriever.retrieve(bundle)
            assert await retriever.aretrieve(bundle) == given
            assert counting.query_calls == 0
            embedded = retriever.retrieve(query)
        finally:
            sync_memory.close()
    else:
        async_memory = await AsyncMemory.open(pg_dsn, counting)
        try:
            await async_memory.add_facts(FACTS, **scope)
            retriever = MemsodaRetriever(memory=async_memory, **scope, mode="facts", k=3)
            given = await retriever.aretrieve(bundle)
            assert counting.query_calls == 0
            embedded = await retriever.aretrieve(query)
        finally:
            await async_memory.close()
    assert counting.query_calls == 1
    assert [n.node.node_id for n in given] == [n.node.node_id for n in embedded]
    assert given[0].node.get_content() == "user drives honda civic"


async def test_async_memory_needs_aretrieve(pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs) -> None:
    async with await AsyncMemory.open(pg_dsn, embedder) as async_memory:
        with pytest.raises(ConfigurationError, match="aretrieve"):
            MemsodaRetriever(memory=async_memory, **scope).retrieve(QUERY)


def test_invalid_arguments(sync_memory: Memory, scope: ScopeArgs) -> None:
    with pytest.raises(ConfigurationError):
        MemsodaRetriever(memory=sync_memory, **scope, mode="chunks")  # type: ignore[arg-type]
    with pytest.raises(LimitError):
        MemsodaRetriever(memory=sync_memory, **scope, k=0)


async def test_query_engine(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(FACTS, **scope)
    engine = RetrieverQueryEngine.from_args(retriever_for(memory, scope, k=3), llm=MockLLM())
    response = await engine.aquery(QUERY)
    assert "user drives honda civic" in str(response)  # MockLLM echoes the prompt it was given
    assert "reasons" not in str(response)  # metadata stays out of the prompt
    (source,) = response.source_nodes
    assert source.node.node_id.startswith("memsoda-context-")
    if not memory.is_async:
        assert "user drives honda civic" in str(engine.query(QUERY))


async def test_chat_engine(memory: Either, scope: ScopeArgs, chat_memory: ChatMemoryFactory) -> None:
    await memory.add_facts(FACTS, **scope)
    engine = ContextChatEngine.from_defaults(
        retriever=retriever_for(memory, scope, k=3), llm=MockLLM(), memory=chat_memory()
    )
    response = await engine.achat(QUERY)
    assert "user drives honda civic" in response.response
    assert response.source_nodes[0].node.node_id.startswith("memsoda-context-")


async def test_a_chat_message_over_the_query_limit_is_recalled_by_its_head(
    memory: Either, scope: ScopeArgs, chat_memory: ChatMemoryFactory
) -> None:
    await memory.add_facts(FACTS, **scope)
    engine = ContextChatEngine.from_defaults(
        retriever=retriever_for(memory, scope, k=3), llm=MockLLM(max_tokens=8), memory=chat_memory()
    )
    pasted = QUERY + " Some notes I pasted. " * 250  # the engine retrieves by the user's message
    assert len(pasted) > MAX_QUERY_CHARS
    response = await engine.achat(pasted)
    assert "user drives honda civic" in response.source_nodes[0].node.get_content()


async def test_memory_block_fills_the_agent_memory(
    memory: Either, scope: ScopeArgs, chat_memory: ChatMemoryFactory
) -> None:
    await memory.add_facts(FACTS, **scope)
    block = MemsodaMemoryBlock(memory=memory.raw, **scope, k=3)
    chat = chat_memory(session_id="s1", memory_blocks=[block])
    await chat.aput(ChatMessage(role="user", content="Hi there"))
    await chat.aput(ChatMessage(role="assistant", content="Hello! How can I help?"))
    messages = await chat.aget(input=QUERY)
    system = messages[0]
    assert system.role == "system"
    assert "<memsoda>" in (system.content or "")
    assert "user drives honda civic" in (system.content or "")
    assert [m.content for m in messages[1:]] == ["Hi there", "Hello! How can I help?"]


async def test_memory_block_follows_the_session(memory: Either, chat_memory: ChatMemoryFactory) -> None:
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    await memory.add_facts([FACTS[0]], dataset=alice, project="app")
    await memory.add_facts(
        [{"subject": "user", "predicate": "drives", "object": "tesla model 3", "object_type": "PRODUCT"}],
        dataset=bob,
        project="app",
    )
    block = MemsodaMemoryBlock(memory=memory.raw, project="app", use_session_id=True)  # dataset: the session
    question = ChatMessage(role="user", content=QUERY)

    async def seen(session: str, **block_kwargs: Any) -> str:
        chat = chat_memory(session_id=session, memory_blocks=[block])
        await chat.aput(question)
        return (await chat.aget(**block_kwargs))[0].content or ""

    first = await seen(alice)
    assert "honda civic" in first and "tesla" not in first
    second = await seen(bob)
    assert "tesla model 3" in second and "honda" not in second  # not pinned to the first session
    assert "honda civic" in await seen(alice)
    overridden = await seen(bob, dataset=alice)  # per-call scope wins over the session
    assert "honda civic" in overridden and "tesla" not in overridden
    nobody = await seen(f"nobody-{uuid.uuid4().hex[:8]}")
    assert "<memsoda>" not in nobody  # nothing recalled: no block


async def test_memory_block_fixed_scope_and_other_blocks(
    memory: Either, scope: ScopeArgs, chat_memory: ChatMemoryFactory
) -> None:
    await memory.add_facts(FACTS, **scope)
    blocks: list[BaseMemoryBlock[Any]] = [
        MemsodaMemoryBlock(memory=memory.raw, **scope, priority=1),
        StaticMemoryBlock(name="persona", static_content=[TextBlock(text="You are a helpful assistant.")]),
    ]
    chat = chat_memory(session_id="anything", memory_blocks=blocks)
    assert await MemsodaMemoryBlock(memory=memory.raw, **scope).aget([]) == ""  # no message, no recall
    await chat.aput(ChatMessage(role="user", content="where does my sister live?"))
    content = (await chat.aget())[0].content or ""
    assert "ana lives in porto" in content
    assert "You are a helpful assistant." in content
    with pytest.warns(UserWarning, match="learns nothing"):  # no extractor: said once
        await blocks[0].aput([ChatMessage(role="user", content="ignored")])
    await blocks[0].aput([ChatMessage(role="user", content="ignored again")])
    assert len((await memory.list_facts(**scope)).facts) == len(FACTS)


async def test_memory_block_needs_a_dataset_when_built(memory: Either) -> None:
    with pytest.raises(ScopeError, match="dataset"):  # else a random session_id's scope, or an error at get
        MemsodaMemoryBlock(memory=memory.raw, project="p")
    with pytest.raises(ScopeError, match="project"):
        MemsodaMemoryBlock(memory=memory.raw, project=" ", use_session_id=True)
    with pytest.raises(ScopeError, match="dataset"):
        MemsodaMemoryBlock(memory=memory.raw, dataset="", project="p")


async def test_memory_block_learns_from_flushed_messages(
    memory: Either, scope: ScopeArgs, chat_memory: ChatMemoryFactory
) -> None:
    extractor = ScriptedExtractor(answer(add("I", "plays", "the violin", "I play the violin")))
    block = MemsodaMemoryBlock(memory=memory.raw, **scope, extractor=extractor)
    chat = chat_memory(
        session_id="s-1", memory_blocks=[block], token_limit=60, chat_history_token_ratio=0.5, token_flush_size=20
    )
    await chat.aput(ChatMessage(role="user", content="I play the violin every evening, for about an hour or so."))
    await chat.aput(ChatMessage(role="assistant", content="That is a lovely habit; how long have you played it?"))
    await chat.aput(ChatMessage(role="user", content="Since I was a child, about twenty years now in total."))
    await chat.aget()  # the Memory flushes its oldest messages to the blocks
    (request,) = extractor.requests
    assert request.messages[0].content.startswith("I play the violin")
    (fact,) = (await memory.list_facts(**scope)).facts
    assert fact.text == "user plays the violin"
    assert [s.thread_id for s in await memory.sources(fact.id, **scope)] == ["s-1"]
    later = chat_memory(session_id="s-2", memory_blocks=[MemsodaMemoryBlock(memory=memory.raw, **scope)])
    await later.aput(ChatMessage(role="user", content="Which instrument do I play?"))
    assert "user plays the violin" in ((await later.aget())[0].content or "")


async def test_a_learning_block_reads_only_the_scope_it_learns_into(
    memory: Either, scope: ScopeArgs, chat_memory: ChatMemoryFactory
) -> None:
    """LlamaIndex flushes messages with the session id alone: a per-call dataset would read bob's
    memory and learn bob's conversation into the block's dataset (alice's)."""
    extractor = ScriptedExtractor(answer(add("I", "likes", "jazz", "I like jazz")))
    alice = MemsodaMemoryBlock(memory=memory.raw, **scope, extractor=extractor)
    chat = chat_memory(session_id="bob-1", memory_blocks=[alice])
    await chat.aput(ChatMessage(role="user", content="I like jazz"))
    with pytest.raises(ConfigurationError, match="learns flushed messages into"):
        await chat.aget(dataset="someone-else")
    assert len(await chat.aget(**scope)) >= 1  # its own scope, spelled out, is fine
    reader = MemsodaMemoryBlock(memory=memory.raw, **scope, accept_short_term_memory=False)
    reading = chat_memory(session_id="bob-2", memory_blocks=[reader])  # learns nothing: may read any scope
    await reading.aput(ChatMessage(role="user", content="I like jazz"))
    await reading.aget(dataset="someone-else")
    assert extractor.requests == []


def test_memory_block_sync_get(sync_memory: Memory, scope: ScopeArgs, sync_chat_memory: ChatMemoryFactory) -> None:
    sync_memory.add_facts(FACTS, **scope)
    chat = sync_chat_memory(memory_blocks=[MemsodaMemoryBlock(memory=sync_memory, **scope)])
    chat.put(ChatMessage(role="user", content=QUERY))
    assert "user drives honda civic" in (chat.get()[0].content or "")


def test_llamaindex_embedder_round_trip(pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs) -> None:
    wrapped = LlamaIndexEmbedder(LocalLlamaEmbedding(inner=embedder, model_name=embedder.model))
    assert (wrapped.model, wrapped.dimensions) == (embedder.model, 384)
    with Memory.open(pg_dsn, wrapped) as through_llamaindex:
        through_llamaindex.add_facts(FACTS, **scope)
        nodes = MemsodaRetriever(memory=through_llamaindex, **scope, mode="facts", k=1).retrieve(QUERY)
    assert nodes[0].node.get_content() == "user drives honda civic"


async def test_llamaindex_embedder_protocol() -> None:
    mock = MockEmbedding(embed_dim=8)
    with pytest.raises(ConfigurationError, match="model="):
        LlamaIndexEmbedder(mock)
    wrapped = LlamaIndexEmbedder(mock, model="mock-8")
    assert (wrapped.model, wrapped.dimensions) == ("mock-8", 8)
    assert LlamaIndexEmbedder(mock, model="mock", dimensions=8).dimensions == 8
    assert wrapped.embed_query("a") == await wrapped.aembed_query("a") == [0.5] * 8
    assert wrapped.embed_documents(["a", "b"]) == await wrapped.aembed_documents(["a", "b"])


async def test_retriever_settings_per_call(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(
        [
            {"subject": "user", "predicate": "lives in", "object": "amsterdam", "valid_at": "2020-01-01",
             "invalid_at": "2024-01-01"},
            {"subject": "user", "predicate": "lives in", "object": "utrecht", "valid_at": "2024-01-01"},
        ],
        **scope,
    )  # fmt: skip
    retriever = retriever_for(memory, scope, mode="facts", k=8)
    then = retriever.with_options(as_of="2022-06-01", k=1)
    assert (then.k, then.as_of, retriever.as_of) == (1, "2022-06-01", None)
    (node,) = await then.aretrieve("where does the user live?")
    assert node.node.get_content() == "user lives in amsterdam"
    now = [n.node.get_content() for n in await retriever.aretrieve("where does the user live?")]
    assert now == ["user lives in utrecht"]
    with pytest.raises(LimitError):
        retriever.with_options(k=10_000)


async def test_retriever_known_at(memory: Either, scope: ScopeArgs) -> None:
    (old,) = await memory.add_facts(
        [{"subject": "user", "predicate": "lives in", "object": "amsterdam", "valid_at": "2020-01-01"}], **scope
    )
    learned = (await memory.get_fact(old, **scope)).created_at
    await memory.supersede(old, {"subject": "user", "predicate": "lives in", "object": "utrecht"}, **scope)
    retriever = retriever_for(memory, scope, mode="facts", k=1)
    (then,) = await retriever.with_options(known_at=learned).aretrieve("where does the user live?")
    (now,) = await retriever.aretrieve("where does the user live?")
    assert (then.node.get_content(), now.node.get_content()) == ("user lives in amsterdam", "user lives in utrecht")


class RecordingLLM(MockLLM):
    """Records the messages of each chat call and answers as a ReAct agent's final step."""

    seen: list[list[ChatMessage]] = Field(default_factory=list)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.seen.append(list(messages))
        return ChatResponse(message=ChatMessage(role="assistant", content="Thought: I know.\nAnswer: A Honda Civic."))


@pytest.mark.parametrize("system_prompt", [None, "You are a helpful assistant."])
async def test_react_agent_sees_the_block_with_insert_method_user(
    memory: Either, scope: ScopeArgs, chat_memory: ChatMemoryFactory, system_prompt: str | None
) -> None:
    """llama-index-core 0.14's `ReActAgent` drops the first system message, where the block goes by
    default; with `insert_method=USER` (as documented) the block reaches the model."""
    await memory.add_facts(FACTS, **scope)

    async def sent(**memory_kwargs: Any) -> str:
        llm = RecordingLLM(max_tokens=None)  # MockLLM's default, which a type checker does not see
        agent = ReActAgent(tools=[], llm=llm, streaming=False, system_prompt=system_prompt)
        chat = chat_memory(memory_blocks=[MemsodaMemoryBlock(memory=memory.raw, **scope, k=3)], **memory_kwargs)
        answer = await agent.run(user_msg=QUERY, memory=chat)
        assert str(answer) == "A Honda Civic."
        (messages,) = llm.seen
        return "\n".join(m.content or "" for m in messages)

    assert "user drives honda civic" in await sent(insert_method=InsertMethod.USER)
    if system_prompt is None:  # the default loses the block: if this fails, LlamaIndex fixed it
        assert "user drives honda civic" not in await sent()


async def test_the_block_and_the_retriever_need_a_project(memory: Either, scope: ScopeArgs) -> None:
    with pytest.raises(ScopeError, match="project"):
        MemsodaMemoryBlock(memory=memory.raw, dataset="alice")  # type: ignore[call-arg]  # no project, on purpose
    with pytest.raises(TypeError, match="project"):
        MemsodaRetriever(memory=memory.raw, dataset="alice")  # type: ignore[call-arg]
    with pytest.raises(ScopeError, match="project"):
        MemsodaRetriever(memory=memory.raw, dataset="alice", project=" ")


BLOCK_BAD_ARGUMENTS: list[tuple[dict[str, Any], type[MemsodaError]]] = [
    ({"k": 0}, LimitError),
    ({"k": -1}, LimitError),
    ({"k": "3"}, ArgumentTypeError),
    ({"profile_max_facts": 0}, LimitError),
    ({"include": ["nothing"]}, ValidationError),
    ({"memory": object()}, ConfigurationError),
    ({"project": 5}, ScopeError),
    ({"priority": "high"}, ArgumentTypeError),  # a LlamaIndex field: pydantic's refusal, as memsoda's type
]


@pytest.mark.parametrize(("bad", "error"), BLOCK_BAD_ARGUMENTS, ids=lambda v: repr(v) if isinstance(v, dict) else "")
async def test_bad_arguments_raise_memsodas_errors_not_pydantics(
    memory: Either, scope: ScopeArgs, bad: dict[str, Any], error: type[MemsodaError]
) -> None:
    """The block and the retriever refuse a bad argument when built, with the documented memsoda
    error (LangChain's retriever raises the same), never pydantic's ValidationError."""
    with pytest.raises(error) as raised:
        MemsodaMemoryBlock(**{"memory": memory.raw, **scope, **bad})
    assert not isinstance(raised.value, PydanticValidationError)
    if "k" in bad or "memory" in bad:
        with pytest.raises(error):
            MemsodaRetriever(**{"memory": memory.raw, **scope, **bad})


async def test_retriever_copy_for_another_user(memory: Either, scope: ScopeArgs) -> None:
    bob = f"bob-{uuid.uuid4().hex[:8]}"
    await memory.add_facts(FACTS, **scope)
    bobs = [{"subject": "user", "predicate": "drives", "object": "tesla model 3", "object_type": "PRODUCT"}]
    await memory.add_facts(bobs, dataset=bob, project=scope["project"])
    retriever = retriever_for(memory, scope, k=3)
    for_bob = retriever.with_options(dataset=bob)
    assert (for_bob.dataset, retriever.dataset) == (bob, scope["dataset"])
    bob_sees = " ".join(n.node.get_content() for n in await for_bob.aretrieve(QUERY))
    assert "tesla model 3" in bob_sees and "honda" not in bob_sees
    assert "honda civic" in " ".join(n.node.get_content() for n in await retriever.aretrieve(QUERY))
    with pytest.raises(ScopeError):
        retriever.with_options(dataset="")
