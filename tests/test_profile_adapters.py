"""The standing profile in the frameworks, offline against the real server: `MemsodaContextMiddleware`
in LangChain's real `create_agent` (driven by LangChain's fake chat model, which records what it was
sent), and `MemsodaProfileBlock` with `MemsodaMemoryBlock(exclude_profile=True)` in a real LlamaIndex
`Memory`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import InputAgentState
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatResult
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import BaseMemoryBlock, InsertMethod
from llama_index.core.memory import Memory as ChatMemory
from pydantic import Field
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memsoda_core import ConfigurationError, LimitError, Memory, ScopeArgs, ScopeError
from memsoda_core.limits import MAX_QUERY_CHARS
from memsoda_langchain import MemsodaContextMiddleware
from memsoda_langchain.context import RECALL_NAME
from memsoda_llamaindex import MemsodaMemoryBlock, MemsodaProfileBlock
from tests.conftest import Either

FACTS = [
    {"subject": "user", "predicate": "lives in", "object": "lisbon", "valid_at": "2024-01-01"},
    {"subject": "user", "predicate": "works as", "object": "marine biologist", "valid_at": "2023-05-01"},
    {"subject": "user", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
    {"subject": "ana", "predicate": "lives in", "object": "porto"},
]
QUESTION = "What car do I drive, and where does Ana live?"
PASTED = QUESTION + " Here are my notes: " + "nothing much happened this week. " * 200
"""A user message longer than recall's query limit (`limits.MAX_QUERY_CHARS`): its head is the question."""


class RecordingFakeChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, keeping the messages of every call."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def recording(*replies: str) -> RecordingFakeChatModel:
    return RecordingFakeChatModel(messages=iter([AIMessage(r) for r in replies]), seen=[])


async def test_middleware_puts_the_profile_in_the_system_message_and_the_recall_after_the_user(
    memory: Either, scope: ScopeArgs
) -> None:
    await memory.add_facts(FACTS, **scope)
    profile = await memory.profile(**scope, max_facts=2)
    model = recording("The Civic.", "Porto.")
    middleware = MemsodaContextMiddleware(memory=memory.raw, **scope, k=3, max_facts=2)
    agent = create_agent(model, [], system_prompt="You are helpful.", middleware=[middleware])
    first: InputAgentState = {"messages": [HumanMessage(QUESTION)]}
    state = await agent.ainvoke(first) if memory.is_async else agent.invoke(first)
    (sent,) = model.seen
    assert isinstance(sent[0], SystemMessage)
    assert sent[0].content == "You are helpful.\n\n" + profile.text
    assert [type(m) for m in sent[1:]] == [HumanMessage, HumanMessage]
    assert sent[1].content == QUESTION
    block = sent[2]
    assert block.name == RECALL_NAME
    assert "user drives honda civic" in str(block.content)
    for fact in profile.facts:  # not repeated
        assert f"{fact.subject} {fact.predicate} {fact.object}" not in str(block.content)
    assert all(m.name != RECALL_NAME for m in state["messages"])  # the request only, not the state
    # the next turn: the same system bytes, the earlier turn unchanged before the new message
    second: InputAgentState = {"messages": [*state["messages"], HumanMessage("And Ana?")]}
    await agent.ainvoke(second) if memory.is_async else agent.invoke(second)
    again = model.seen[1]
    assert again[0].content == sent[0].content
    assert [m.content for m in again[1:3]] == [QUESTION, "The Civic."]
    assert again[4].name == RECALL_NAME and "ana lives in porto" in str(again[4].content)


async def test_middleware_keeps_the_system_message_s_blocks_and_kwargs(memory: Either, scope: ScopeArgs) -> None:
    """A provider's cache breakpoint is a content block's `cache_control`: the profile joins as a block
    of its own after the caller's, which stay as they were."""
    await memory.add_facts(FACTS, **scope)
    profile = await memory.profile(**scope, max_facts=2)
    model = recording("Hi.")
    instructions = {"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}}
    system = SystemMessage(content=[instructions], additional_kwargs={"x": 1}, id="sys-1")
    middleware = MemsodaContextMiddleware(memory=memory.raw, **scope, max_facts=2)
    agent = create_agent(model, [], system_prompt=system, middleware=[middleware])
    request: InputAgentState = {"messages": [HumanMessage(QUESTION)]}
    await agent.ainvoke(request) if memory.is_async else agent.invoke(request)
    sent = model.seen[0][0]
    assert isinstance(sent, SystemMessage) and sent.additional_kwargs == {"x": 1} and sent.id == "sys-1"
    assert sent.content == [instructions, {"type": "text", "text": profile.text}]


async def test_middleware_with_an_empty_memory_leaves_the_prompt_alone(memory: Either, scope: ScopeArgs) -> None:
    model = recording("Hi.")
    agent = create_agent(
        model, [], system_prompt="Be brief.", middleware=[MemsodaContextMiddleware(memory=memory.raw, **scope)]
    )
    request: InputAgentState = {"messages": [HumanMessage("hello")]}
    await agent.ainvoke(request) if memory.is_async else agent.invoke(request)
    (sent,) = model.seen
    assert [m.content for m in sent] == ["Be brief.", "hello"]


async def test_middleware_recalls_for_a_message_over_the_query_limit(memory: Either, scope: ScopeArgs) -> None:
    assert len(PASTED) > MAX_QUERY_CHARS
    await memory.add_facts(FACTS, **scope)
    model = recording("The Civic.")
    middleware = MemsodaContextMiddleware(memory=memory.raw, **scope, k=3, max_facts=1)
    agent = create_agent(model, [], middleware=[middleware])
    request: InputAgentState = {"messages": [HumanMessage(PASTED)]}
    state = await agent.ainvoke(request) if memory.is_async else agent.invoke(request)
    assert state["messages"][-1].content == "The Civic."
    (sent,) = model.seen
    assert sent[-2].content == PASTED  # the user's message goes to the model whole
    assert sent[-1].name == RECALL_NAME and "honda civic" in str(sent[-1].content)


def test_middleware_needs_a_scope(sync_memory: Memory) -> None:
    with pytest.raises(ConfigurationError):
        MemsodaContextMiddleware(memory=sync_memory, project="p", dataset="a", dataset_from="user_id")


@pytest.fixture
async def engines() -> AsyncIterator[list[AsyncEngine]]:
    made: list[AsyncEngine] = []
    yield made
    for engine in made:
        await engine.dispose()


async def test_llamaindex_profile_block_and_recall_without_repeats(
    memory: Either, scope: ScopeArgs, engines: list[AsyncEngine]
) -> None:
    await memory.add_facts(FACTS, **scope)
    profile = await memory.profile(**scope, max_facts=2)
    blocks: list[BaseMemoryBlock[Any]] = [
        MemsodaProfileBlock(memory=memory.raw, **scope, max_facts=2),
        MemsodaMemoryBlock(memory=memory.raw, **scope, k=3, exclude_profile=True, profile_max_facts=2, priority=1),
    ]
    engines.append(create_async_engine("sqlite+aiosqlite:///:memory:"))
    chat = ChatMemory.from_defaults(
        async_engine=engines[-1], session_id="s", memory_blocks=blocks, insert_method=InsertMethod.USER
    )
    await chat.aput(ChatMessage(role="user", content=QUESTION))
    messages = await chat.aget()
    assert messages[0].role == "system" and messages[0].content == profile.text
    user = messages[-1].content or ""
    assert QUESTION in user and "user drives honda civic" in user
    for fact in profile.facts:
        assert f"{fact.subject} {fact.predicate} {fact.object}" not in user
    await memory.add_facts([{"subject": "ana", "predicate": "likes", "object": "surfing"}], **scope)
    assert (await chat.aget())[0].content == profile.text  # an unrelated write: the same bytes


async def test_llamaindex_profile_block_needs_a_dataset_when_built(
    memory: Either, scope: ScopeArgs, engines: list[AsyncEngine]
) -> None:
    """As `MemsodaMemoryBlock`: no dataset (nor use_session_id) is a `ScopeError` when the block is
    built, not at its first `aget`; bad arguments are memsoda's errors then too."""
    with pytest.raises(ScopeError, match="dataset"):
        MemsodaProfileBlock(memory=memory.raw, project="p")
    with pytest.raises(ScopeError, match="dataset"):
        MemsodaProfileBlock(memory=memory.raw, dataset="", project="p")
    with pytest.raises(ScopeError, match="project"):
        MemsodaProfileBlock(memory=memory.raw, dataset="a", project=" ")
    with pytest.raises(LimitError):
        MemsodaProfileBlock(memory=memory.raw, **scope, max_facts=0)
    with pytest.raises(ConfigurationError):
        MemsodaProfileBlock(memory=object(), **scope)  # type: ignore[arg-type]
    await memory.add_facts(FACTS, **scope)
    block = MemsodaProfileBlock(memory=memory.raw, project=scope["project"], use_session_id=True)
    engines.append(create_async_engine("sqlite+aiosqlite:///:memory:"))
    chat = ChatMemory.from_defaults(async_engine=engines[-1], session_id=scope["dataset"], memory_blocks=[block])
    await chat.aput(ChatMessage(role="user", content=QUESTION))
    assert (await chat.aget())[0].content == (await memory.profile(**scope)).text


async def test_llamaindex_block_recalls_for_a_message_over_the_query_limit(
    memory: Either, scope: ScopeArgs, engines: list[AsyncEngine]
) -> None:
    await memory.add_facts(FACTS, **scope)
    engines.append(create_async_engine("sqlite+aiosqlite:///:memory:"))
    block = MemsodaMemoryBlock(memory=memory.raw, **scope, k=3)
    chat = ChatMemory.from_defaults(async_engine=engines[-1], session_id="s", memory_blocks=[block], token_limit=40_000)
    await chat.aput(ChatMessage(role="user", content=PASTED))
    messages = await chat.aget()
    assert "honda civic" in (messages[0].content or "")
    assert messages[-1].content == PASTED


def test_middleware_reads_the_user_from_the_run_config(sync_memory: Memory) -> None:
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    sync_memory.add_facts([FACTS[0]], dataset=alice, project="app")
    sync_memory.add_facts([{"subject": "user", "predicate": "lives in", "object": "oslo"}], dataset=bob, project="app")
    model = recording("Lisbon.", "Oslo.")
    middleware = MemsodaContextMiddleware(memory=sync_memory, project="app", dataset_from="user_id")
    agent = create_agent(model, [], middleware=[middleware])
    for user in (alice, bob):
        agent.invoke({"messages": [HumanMessage("Where do I live?")]}, config={"configurable": {"user_id": user}})
    assert "lisbon" in str(model.seen[0][0].content) and "oslo" not in str(model.seen[0][0].content)
    assert "oslo" in str(model.seen[1][0].content) and "lisbon" not in str(model.seen[1][0].content)
    with pytest.raises(ScopeError):
        agent.invoke({"messages": [HumanMessage("Where do I live?")]})
