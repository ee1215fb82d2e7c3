"""`memsoda_langchain.memory_tools` in real agents, offline: LangChain's `create_agent` and
LangGraph's prebuilt ReAct agent driving LangChain's fake chat model (scripted tool calls). An
agent saves a fact in one session and recalls it, with its id, in the next; corrects and ends
facts by id; memsoda's errors come back to the model as tool answers and change nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt import create_react_agent

from memsoda_core import ConfigurationError, LimitError, Memory, ScopeArgs, ScopeError
from memsoda_core.limits import MAX_K
from memsoda_langchain import memory_tools
from tests.conftest import Either
from tests.scripted_extractor import ScriptedExtractor, add, answer


class ToolCallingFakeChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, able to bind tools (it answers with the scripted messages)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def calls(*steps: tuple[str, dict[str, Any]], final: str = "Done.") -> ToolCallingFakeChatModel:
    script = [
        AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{i}"}])
        for i, (name, args) in enumerate(steps)
    ]
    return ToolCallingFakeChatModel(messages=iter([*script, AIMessage(final)]))


def tool_answers(state: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


async def test_an_agent_learns_in_one_session_and_recalls_in_the_next(memory: Either, scope: ScopeArgs) -> None:
    tools = memory_tools(memory.raw, **scope)
    saving = create_agent(
        calls(("save_memory", {"subject": "user", "predicate": "drives", "object": "honda civic"})), tools
    )
    first = await saving.ainvoke({"messages": [{"role": "user", "content": "I drive a Honda Civic."}]})
    assert tool_answers(first)[0].startswith("Saved as fact(s)")
    recalling = create_agent(calls(("recall_memory", {"query": "what car does the user drive?", "k": 3})), tools)
    second = await recalling.ainvoke({"messages": [{"role": "user", "content": "What do I drive?"}]})
    (shown,) = tool_answers(second)
    (fact,) = (await memory.list_facts(**scope)).facts
    assert f"[{fact.id}] user drives honda civic (valid " in shown


async def test_correct_and_end_by_id(memory: Either, scope: ScopeArgs) -> None:
    lives, job = await memory.add_facts(
        [
            {"subject": "user", "predicate": "lives in", "object": "amsterdam", "valid_at": "2020-01-01"},
            {"subject": "user", "predicate": "works at", "object": "asml", "valid_at": "2020-01-01"},
        ],
        **scope,
    )
    agent = create_agent(
        calls(
            ("correct_memory", {"fact_id": lives, "subject": "user", "predicate": "lives in", "object": "utrecht"}),
            ("end_memory", {"fact_id": job, "ended_at": "2026-01-31"}),
            ("end_memory", {"fact_id": 10**12}),
            ("end_memory", {"fact_id": job}),
        ),
        memory_tools(memory.raw, **scope),
    )
    state = await agent.ainvoke({"messages": [{"role": "user", "content": "I moved to Utrecht and quit ASML."}]})
    corrected, ended, missing, again = tool_answers(state)
    assert corrected.startswith(f"Fact {lives} is replaced by fact ") and ended == f"Fact {job} has ended."
    assert "NotFoundError" in missing and "NotLiveError" in again
    live = await memory.list_facts(**scope)
    assert [f.object for f in live.facts] == ["utrecht"]
    assert (await memory.get_fact(job, **scope)).invalid_at is not None


def test_a_sentence_is_saved_through_the_extractor(sync_memory: Memory, scope: ScopeArgs) -> None:
    extractor = ScriptedExtractor(answer(add("I", "is allergic to", "peanuts", "allergic to peanuts")))
    agent = create_react_agent(
        calls(("save_memory", {"text": "Remember that I am allergic to peanuts."})),
        memory_tools(sync_memory, **scope, extractor=extractor),
    )
    state = agent.invoke({"messages": [{"role": "user", "content": "I am allergic to peanuts."}]})
    assert tool_answers(state)[0].startswith("Saved as fact(s)")
    (fact,) = sync_memory.list_facts(**scope).facts
    assert fact.text == "user is allergic to peanuts"
    without = create_react_agent(calls(("save_memory", {"text": "I like tea."})), memory_tools(sync_memory, **scope))
    (refused,) = tool_answers(without.invoke({"messages": [{"role": "user", "content": "I like tea."}]}))
    assert "no extractor" in refused
    assert len(sync_memory.list_facts(**scope).facts) == 1


async def test_one_agent_serves_many_users_by_the_run_config(memory: Either, scope: ScopeArgs) -> None:
    """One tool set and one agent: each run's `config["configurable"]["user_id"]` is its dataset."""
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    tools = memory_tools(memory.raw, dataset_from="user_id", project=scope["project"])
    agent = create_agent(
        ToolCallingFakeChatModel(
            messages=iter(
                [
                    AIMessage("", tool_calls=[call("save_memory", subject="user", predicate="drives", object="volvo")]),
                    AIMessage("Saved."),
                    AIMessage("", tool_calls=[call("save_memory", subject="user", predicate="drives", object="fiat")]),
                    AIMessage("Saved."),
                    AIMessage("", tool_calls=[call("recall_memory", query="which car does the user drive?")]),
                    AIMessage("Done."),
                    AIMessage("", tool_calls=[call("recall_memory", query="which car does the user drive?")]),
                    AIMessage("Done."),
                ]
            )
        ),
        tools,
    )

    async def run(user: str) -> list[str]:
        config: RunnableConfig = {"configurable": {"user_id": user}}
        return tool_answers(await agent.ainvoke({"messages": [{"role": "user", "content": "hi"}]}, config))

    assert (await run(alice))[0].startswith("Saved as fact(s)")
    assert (await run(bob))[0].startswith("Saved as fact(s)")
    (seen_by_alice,) = await run(alice)
    (seen_by_bob,) = await run(bob)
    assert "volvo" in seen_by_alice and "fiat" not in seen_by_alice
    assert "fiat" in seen_by_bob and "volvo" not in seen_by_bob
    assert [f.object for f in (await memory.list_facts(dataset=alice, project=scope["project"])).facts] == ["volvo"]
    assert [f.object for f in (await memory.list_facts(dataset=bob, project=scope["project"])).facts] == ["fiat"]


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call-{uuid.uuid4().hex[:6]}"}


def test_a_run_without_the_user_key_raises_and_writes_nothing(sync_memory: Memory, scope: ScopeArgs) -> None:
    tools = memory_tools(sync_memory, dataset_from="user_id", project=scope["project"])
    agent = create_agent(calls(("save_memory", {"subject": "user", "predicate": "likes", "object": "tea"})), tools)
    with pytest.raises(ScopeError, match=r"config\['configurable'\]\['user_id'\].*thread_id"):
        agent.invoke({"messages": [{"role": "user", "content": "I like tea."}]}, {"configurable": {"thread_id": "t"}})
    save = next(t for t in tools if t.name == "save_memory")
    with pytest.raises(ScopeError, match="must be a string"):
        save.invoke({"subject": "user", "predicate": "likes", "object": "tea"}, {"configurable": {"user_id": 7}})
    assert sync_memory.list_facts(dataset="7", project=scope["project"]).facts == ()
    assert sync_memory.list_facts(**scope).facts == ()
    fixed = memory_tools(sync_memory, **scope)  # the fixed form ignores the config
    fixed[1].invoke({"subject": "user", "predicate": "likes", "object": "tea"}, {"configurable": {"user_id": "x"}})
    assert [f.object for f in sync_memory.list_facts(**scope).facts] == ["tea"]


def test_the_scope_rule_is_checked_when_the_tools_are_built(sync_memory: Memory, scope: ScopeArgs) -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        memory_tools(sync_memory, dataset="a", dataset_from="user_id", project="p")
    with pytest.raises(ScopeError, match="dataset is required"):
        memory_tools(sync_memory, project="p")
    with pytest.raises(ScopeError, match="project"):
        memory_tools(sync_memory, dataset="a", project=" ")
    with pytest.raises(TypeError, match="project"):
        memory_tools(sync_memory, dataset="a")  # type: ignore[call-arg]
    with pytest.raises(LimitError):
        memory_tools(sync_memory, **scope, k=0)


async def test_recall_k_out_of_range_is_an_error_the_model_sees(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(
        [{"subject": "user", "predicate": "drives", "object": f"car {n}", "valid_at": "2020-01-01"} for n in range(5)],
        **scope,
    )
    agent = create_agent(
        calls(
            ("recall_memory", {"query": "car", "k": 0}),
            ("recall_memory", {"query": "car", "k": -2}),
            ("recall_memory", {"query": "car", "k": MAX_K + 1}),
            ("recall_memory", {"query": "car", "k": 2}),
            ("recall_memory", {"query": "car"}),
        ),
        memory_tools(memory.raw, **scope, k=3),
    )
    zero, negative, over, two, default = tool_answers(
        await agent.ainvoke({"messages": [{"role": "user", "content": "my cars?"}]})
    )
    for refused, k in ((zero, 0), (negative, -2), (over, MAX_K + 1)):
        assert refused.startswith("LimitError:") and f"got {k}" in refused
    assert two.count("\n[") == 2 and default.count("\n[") == 3


async def test_recall_in_an_empty_memory_says_it_holds_no_facts(memory: Either, scope: ScopeArgs) -> None:
    tools = memory_tools(memory.raw, **scope)
    asking = create_agent(calls(("recall_memory", {"query": "what car does the user drive?"})), tools)
    (empty,) = tool_answers(await asking.ainvoke({"messages": [{"role": "user", "content": "What do I drive?"}]}))
    assert empty == "This user's memory holds no facts yet."
    await memory.add_facts([{"subject": "user", "predicate": "lives in", "object": "porto"}], **scope)
    asking = create_agent(calls(("recall_memory", {"query": "what car does the user drive?"})), tools)
    (shown,) = tool_answers(await asking.ainvoke({"messages": [{"role": "user", "content": "What do I drive?"}]}))
    assert shown != empty
